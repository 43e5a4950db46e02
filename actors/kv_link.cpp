#include "actors/kv_link.hpp"

#include <algorithm>

#include <caf/all.hpp>

namespace triad {

namespace {

/// Asks the fetcher for pages: `(kv_fetch_atom, tokens, first, count, seq, reply_to)`.
using kv_fetch_atom = caf::atom_constant<caf::atom("kvfetch")>;

// What one fetch gathers: the blocks' bytes as their reads come back, in chain order.
struct fetch_state {
  std::vector<token> tokens;
  std::size_t first = 0;
  std::vector<kv_page> pages;
  std::vector<bool> ok;
  std::size_t left = 0;
  seq_id seq = 0;
  caf::actor reply_to;

  // The pages read and checked, up to the first that was not: the rest is computed.
  void finish(std::size_t block_tokens) {
    auto chain = chain_hashes(tokens, block_tokens);
    std::vector<kv_page> out;
    for (std::size_t k = 0; k < pages.size() && ok[k]; ++k) {
      auto at = first + k;
      auto& p = pages[k];
      p.hash = chain[at];
      p.parent = at == 0 ? root_hash : chain[at - 1];
      auto begin = tokens.begin() + static_cast<std::ptrdiff_t>(at * block_tokens);
      p.tokens.assign(begin, begin + static_cast<std::ptrdiff_t>(block_tokens));
      out.push_back(std::move(p));
    }
    caf::anon_send(reply_to, kv_fetched_atom::value, seq, std::move(out));
  }
};

caf::behavior fetcher(caf::event_based_actor* self, kv_store store, std::size_t block_tokens) {
  return {
      [self, store, block_tokens](kv_fetch_atom, std::vector<token>& tokens, std::uint64_t first,
                                  std::uint64_t count, seq_id seq, caf::actor& reply_to) {
        auto st = std::make_shared<fetch_state>();
        tokens.resize(std::min<std::size_t>(tokens.size(), (first + count) * block_tokens));
        st->tokens = std::move(tokens);
        st->first = first;
        st->seq = seq;
        st->reply_to = std::move(reply_to);
        auto none = [st, block_tokens] { st->finish(block_tokens); };
        auto chain = chain_hashes(st->tokens, block_tokens);
        chain.erase(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(
                                                       std::min<std::size_t>(first, chain.size())));
        self->request(store.index, caf::infinite, kv_find_atom::value, std::move(chain))
            .then(
                [self, store, st, block_tokens, none](kv_prefix& p) {
                  if (p.ids.empty())
                    return none();
                  auto n = p.ids.size();
                  st->pages.resize(n);
                  st->ok.assign(n, false);
                  st->left = n;
                  for (std::size_t k = 0; k < n; ++k) {
                    auto one = [st, k, block_tokens](bool ok, std::vector<std::uint8_t> bytes) {
                      st->ok[k] = ok;
                      st->pages[k].bytes = std::move(bytes);
                      if (--st->left == 0)
                        st->finish(block_tokens);
                    };
                    self->request(store.store, caf::infinite, kv_read_atom::value, p.ids[k])
                        .then([one](kv_bytes& b) mutable { one(b.ok, std::move(b.bytes)); },
                              [one](caf::error&) mutable { one(false, {}); });
                  }
                },
                [none](caf::error&) { none(); });
      },
  };
}

class store_tier final : public kv_tier {
public:
  store_tier(domain& home, kv_store store, std::string host_pool, std::size_t block_tokens,
             std::size_t block_bytes)
      : store_(std::move(store))
      , host_pool_(std::move(host_pool))
      , block_bytes_(block_bytes)
      , fetcher_(home.spawn(fetcher, store_, block_tokens)) {}

  ~store_tier() override { caf::anon_send_exit(fetcher_, caf::exit_reason::user_shutdown); }

  std::size_t block_bytes() const noexcept override { return block_bytes_; }

  std::size_t held(std::span<const block_hash> chain) const override {
    return store_.directory ? store_.directory->leading(chain) : 0;
  }

  void spill(std::vector<kv_page> pages) override {
    for (auto& p : pages) {
      kv_put put;
      put.pool = host_pool_;
      put.tokens = std::move(p.tokens);
      put.payloads.push_back(std::move(p.bytes));
      put.parent = p.parent;
      put.hold = false;
      caf::anon_send(store_.store, kv_put_atom::value, std::move(put));
    }
  }

  void fetch(std::vector<token> tokens, std::size_t first, std::size_t count, seq_id seq,
             caf::actor reply_to) override {
    caf::anon_send(fetcher_, kv_fetch_atom::value, std::move(tokens),
                   static_cast<std::uint64_t>(first), static_cast<std::uint64_t>(count), seq,
                   std::move(reply_to));
  }

private:
  kv_store store_;
  std::string host_pool_;
  std::size_t block_bytes_;
  caf::actor fetcher_;
};

} // namespace

std::shared_ptr<kv_tier> make_store_tier(domain& home, kv_store store, std::string host_pool,
                                         std::size_t block_tokens, std::size_t block_bytes) {
  return std::make_shared<store_tier>(home, std::move(store), std::move(host_pool), block_tokens,
                                      block_bytes);
}

} // namespace triad

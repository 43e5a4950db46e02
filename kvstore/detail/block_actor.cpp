#include "kvstore/detail/block_actor.hpp"

#include <cstring>

#include <caf/all.hpp>

#include "devices/kv_tier.hpp"
#include "kvstore/store.hpp"

namespace triad::detail {

namespace {

// One block: its bytes and lifecycle operations on them. Nothing on the per-token path
// messages it; it lives in the domain of its memory so copies into it touch local memory.
class block_actor : public homed_actor {
public:
  block_actor(caf::actor_config& cfg, block_id id, block_location where)
      : homed_actor(cfg)
      , id_(id)
      , where_(std::move(where)) {}

  caf::behavior make_behavior() override {
    return {
        [this](block_assign_atom, block_id id, block_location& where) {
          id_ = id;
          where_ = std::move(where);
        },
        [this](block_init_atom, block_id id, block_location& where,
               std::vector<std::uint8_t>& payload) -> std::uint64_t {
          id_ = id;
          where_ = std::move(where);
          auto n = std::min(payload.size(), where_.memory.size());
          std::memcpy(where_.memory.data(), payload.data(), n);
          return block_checksum(where_.memory);
        },
        [this](block_read_atom, std::uint64_t checksum, std::int64_t flip_bit) -> kv_bytes {
          return read(checksum, flip_bit);
        },
        [this](block_lend_atom, std::vector<token>& chain, std::uint64_t page,
               std::uint64_t checksum) -> caf::result<kv_bytes> {
          return lend(std::move(chain), page, checksum);
        },
        [this](block_write_atom, std::uint64_t offset,
               std::vector<std::uint8_t>& bytes) -> std::uint64_t {
          std::memcpy(where_.memory.data() + offset, bytes.data(), bytes.size());
          return block_checksum(where_.memory);
        },
    };
  }

private:
  // The page this block stands for, lent by its device (kv_share_atom): one copy out on the
  // device's driver, summed there and checked here.
  caf::result<kv_bytes> lend(std::vector<token> chain, std::uint64_t page, std::uint64_t checksum) {
    const auto id = id_; // the actor may stand for another block by the time the device answers
    auto owner = caf::actor_cast<caf::actor>(where_.owner);
    if (!owner)
      return failed(id, "its device stopped", true);
    // One token past the page: a device attaches a prompt's cached pages leaving at least one
    // token to compute, so a chain that ends with the page would attach the pages before it
    // only. Its value is never read.
    chain.push_back(0);
    auto promise = make_response_promise<kv_bytes>();
    request(owner, defaults::kvstore::lend_patience, kv_share_atom::value, std::move(chain), page,
            std::uint64_t{1})
        .then(
            [id, promise, checksum](std::vector<kv_page>& pages) mutable {
              if (pages.size() != 1) {
                promise.deliver(failed(id, "its device no longer holds the page", true));
                return;
              }
              auto& p = pages.front();
              const auto sum = block_checksum(std::span<const std::byte>{
                  reinterpret_cast<const std::byte*>(p.bytes.data()), p.bytes.size()});
              if (sum != p.checksum || (checksum != 0 && sum != checksum)) {
                promise.deliver(failed(id, "the lent page failed its check", false));
                return;
              }
              kv_bytes out;
              out.ok = true;
              out.bytes = std::move(p.bytes);
              out.checksum = sum;
              promise.deliver(std::move(out));
            },
            [id, promise](caf::error&) mutable {
              promise.deliver(failed(id, "its device did not lend the page in time", false));
            });
    return promise;
  }

  // A failed read of device page `id`; `gone`: the device no longer has it.
  static kv_bytes failed(block_id id, const std::string& why, bool gone) {
    kv_bytes out;
    out.reason = "block " + std::to_string(id) + " (a device page): " + why;
    out.gone = gone;
    return out;
  }

  kv_bytes read(std::uint64_t checksum, std::int64_t flip_bit) {
    kv_bytes out;
    if (where_.kind == tier::disk) {
      std::vector<std::byte> tmp(where_.size);
      auto r = where_.disk->read(where_.meta->hash, tmp, flip_bit);
      if (!r) {
        out.reason = "block " + std::to_string(id_) + ": " + r.error().message;
        return out;
      }
      out.bytes.resize(tmp.size());
      std::memcpy(out.bytes.data(), tmp.data(), tmp.size());
      out.ok = true;
      return out;
    }
    out.bytes.resize(where_.memory.size());
    std::span<std::byte> dst{reinterpret_cast<std::byte*>(out.bytes.data()), out.bytes.size()};
    auto r = copy_checked(dst, where_.memory, checksum, flip_bit);
    if (!r) {
      out.bytes.clear();
      out.reason = "block " + std::to_string(id_) + ": " + r.error().message;
      return out;
    }
    out.ok = true;
    return out;
  }

  block_id id_;
  block_location where_;
};

// A copy's outcome from the outcome of its last step.
pull_result outcome(const expected<void>& step) {
  return step ? pull_result{true, {}} : pull_result{false, step.error().message};
}

// Fills the block at `to` from `order`'s source, checked on arrival.
pull_result copy_in(const block_location& to, const move_order& order) {
  const auto& src = order.source;
  if (src.kind == tier::disk) {
    if (to.kind == tier::disk)
      return {false, "disk to disk moves are not made"};
    // A file is checked as it is read, straight into the new block's memory.
    return outcome(src.disk->read(src.meta->hash, to.memory, order.flip_bit));
  }
  if (to.kind == tier::disk) {
    std::vector<std::byte> staged(src.memory.size());
    if (auto copied = copy_checked(staged, src.memory, order.checksum, order.flip_bit); !copied)
      return outcome(copied);
    auto meta = *to.meta;
    meta.checksum = order.checksum;
    return outcome(to.disk->write(meta, staged));
  }
  return outcome(copy_checked(to.memory, src.memory, order.checksum, order.flip_bit));
}

// A domain's copy engine: fills new blocks in its domain, a batch per message.
class mover_actor : public homed_actor {
public:
  explicit mover_actor(caf::actor_config& cfg)
      : homed_actor(cfg) {}

  caf::behavior make_behavior() override {
    return {
        [this](move_batch_atom, const std::vector<pull_item>& items) {
          pull_outcomes out;
          out.results.reserve(items.size());
          for (const auto& item : items) {
            out.results.push_back(copy_in(item.to, item.order));
            if (out.results.back().ok)
              send(item.block, block_assign_atom::value, item.id, item.to);
          }
          return out;
        },
    };
  }
};

} // namespace

caf::actor spawn_mover_actor(domain& home) {
  return home.spawn<mover_actor>();
}

caf::actor spawn_block_actor(domain& home, block_id id, block_location where) {
  return home.spawn<block_actor>(id, std::move(where));
}

} // namespace triad::detail

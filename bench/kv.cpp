// triad-bench-kv: the KV store's costs against plain memory operations, in one run.
// - transfer_over_memcpy: the serving path's prefill-to-decode transfer: a prompt's pages from
//   one cpu device's page memory to another's through host blocks leased from the store, in
//   layer groups (send_kv and receive_kv on two threads bound to the two cpus, each piece
//   checked), against memcpy of the same pages between the same two memories on the receiving
//   cpu; both directions, the headline is the worse.
// - sim_stream_over_two_hops (metric): the same path between two simulated devices (an H200
//   prefill device, an SN40L decode device, llama3-8b's KV for 4096 tokens): the wall time in
//   modelled seconds against the two links' times one after the other, beside the pipelined
//   bound (the slower hop plus one group of the faster).
// - host_transfer_over_memcpy: blocks of the `small` preset's size moved between the host pools of
//   two domains through the store (a client actor's request, the store, the destination
//   domain's movers, checked copies, the answer) against memcpy of the same bytes between two
//   buffers of the same kind (one arena buffer per domain, as the pools' are) by the worker
//   thread that copies for the store in that direction; each domain's worker is bound to a cpu
//   of its own. A throughput ratio per direction (1.0: as fast as memcpy); the headline is the
//   worse one. The client actor lives in the store's domain, as the node's request and device
//   actors do; `host_transfer_over_memcpy_thread_client_*` gives the same asked from a non-actor
//   thread, whose wake-ups it includes.
// - block_ops_per_s: allocate (put), share (acquire), lookup (prefix index) and free, each a
//   message round trip answered by the store or its index, pipelined from one client.
// - bytes_per_block_actor: resident memory per stored block beyond its payload (the block
//   actor, the store's record, the index entry and the LRU entry), and that against the
//   `small` preset's block payload.
// - prefix_hit_ratio: on the serving path (a node of one cpu device with 2 MiB of KV and a KV
//   store), a multi-turn agent workload with a shared system prompt whose sessions outgrow the
//   device: prompt tokens served from the device's prefix cache or the store over those a
//   perfect cache (one that forgets nothing) would serve; the same without a store beside it.
//   `prefix_hit_ratio_three_stage*` (metrics): the same workload on the three-stage default
//   (prefill and decode devices), where the pages of each answer are in the decode device's
//   memory (`prefix_three_stage_from_peer_tokens`: copied from there).

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <immintrin.h>

#include <CLI/CLI.hpp>
#include <caf/all.hpp>

#include "actors/node.hpp"
#include "bench/report.hpp"
#include "devices/kv_cache.hpp"
#include "devices/kv_stream.hpp"
#include "devices/model.hpp"
#include "devices/prefix_hash.hpp"
#include "devices/sim/profile.hpp"
#include "devices/sim/sim_backend.hpp"
#include "devices/tokenizer.hpp"
#include "kvstore/store.hpp"
#include "runtime/main_guard.hpp"
#include "runtime/memory.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Resident bytes of this process (from /proc/self/statm).
std::uint64_t resident_bytes() {
  std::ifstream f{"/proc/self/statm"};
  std::uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::vector<triad::token> tokens_of(std::size_t n, triad::token first) {
  std::vector<triad::token> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = first + static_cast<triad::token>(i);
  return t;
}

// The cpus this process may run on.
std::vector<unsigned> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<unsigned> out;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0)
    for (unsigned c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        out.push_back(c);
  if (out.empty())
    out.push_back(0);
  return out;
}

// Binds the calling thread to `cpu`.
bool pin_this_thread(unsigned cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::pthread_setaffinity_np(::pthread_self(), sizeof(set), &set) == 0;
}

// Runs `fn` on a worker of domain `d` (the only one in this benchmark's domains) and returns
// its result.
template<class R, class F>
R in_domain(triad::domain& d, F fn) {
  std::promise<R> result;
  d.spawn([&](caf::event_based_actor* self) {
    result.set_value(fn());
    self->quit();
  });
  return result.get_future().get();
}

// Actors running in each domain.
std::vector<std::size_t> running_actors(triad::domain_set& domains) {
  std::vector<std::size_t> out;
  for (unsigned d = 0;; ++d) {
    auto dom = domains.find(d);
    if (!dom)
      return out;
    out.push_back((*dom)->system().registry().running());
  }
}

// Waits (up to 30 s) until no domain runs more actors than `before`: a store's block actors
// end after the store does, on the domains' workers, and a phase that ran beside their exits
// would measure them too.
void settle(triad::domain_set& domains, const std::vector<std::size_t>& before) {
  auto until = clock_type::now() + 30s;
  for (;;) {
    auto now = running_actors(domains);
    bool done = true;
    for (std::size_t d = 0; d < now.size() && d < before.size(); ++d)
      done = done && now[d] <= before[d];
    if (done || clock_type::now() > until)
      return;
    std::this_thread::sleep_for(1ms);
  }
}

// Seconds a transfer of `ids` into `pool` takes, asked by an actor in `home`: from its request
// to the store's answer, both seen on that actor's worker.
double timed_transfer(triad::domain& home, const triad::kv_store_actor& store,
                      const std::vector<triad::block_id>& ids, const std::string& pool) {
  std::promise<std::pair<double, std::string>> result;
  home.spawn([&](caf::event_based_actor* client) {
    auto t0 = clock_type::now();
    client->request(store, caf::infinite, triad::kv_transfer_atom::value, ids, pool)
        .then(
            [&, client, t0](triad::kv_reply& r) {
              result.set_value({seconds_since(t0), r.ok ? "" : r.reason});
              client->quit();
            },
            [&, client](caf::error& e) {
              result.set_value({0, caf::to_string(e)});
              client->quit();
            });
  });
  auto [secs, error] = result.get_future().get();
  if (!error.empty())
    throw std::runtime_error("transfer: " + error);
  return secs;
}

struct bench_node {
  std::unique_ptr<triad::topology> topo;
  std::unique_ptr<triad::domain_set> domains;
};

bench_node start_node() {
  bench_node n;
  auto t = triad::topology::load_synthetic("pack:1 numa:2 core:1 pu:1");
  if (!t)
    throw std::runtime_error(t.error().message);
  n.topo = std::make_unique<triad::topology>(std::move(t).value());
  triad::placement_request request;
  request.tool_cores = 1;
  auto p = triad::make_plan(n.topo->info(), request);
  if (!p)
    throw std::runtime_error(p.error().message);
  for (auto& d : p->domains)
    d.orchestration = true;
  triad::scheduler_config sched;
  sched.threads_per_domain = 1;
  auto s = triad::domain_set::start(*n.topo, *p, sched, false);
  if (!s)
    throw std::runtime_error(s.error().message);
  n.domains = std::move(s).value();
  return n;
}

triad::kv_store start_store(bench_node& n, std::size_t block_tokens, std::size_t block_bytes,
                            std::size_t blocks_per_pool) {
  triad::kv_store_config c;
  c.block_tokens = block_tokens;
  c.block_bytes = block_bytes;
  c.pools.push_back({"host0", triad::tier::host, 0, blocks_per_pool * block_bytes, false});
  c.pools.push_back({"host1", triad::tier::host, 1, blocks_per_pool * block_bytes, false});
  auto s = triad::spawn_kv_store(*n.domains, n.domains->orchestration(), c);
  if (!s)
    throw std::runtime_error(s.error().message);
  return *s;
}

template<class R, class... Ts>
R ask(caf::scoped_actor& self, const triad::kv_store_actor& to, Ts&&... xs) {
  R out{};
  self->request(to, 120s, std::forward<Ts>(xs)...)
      .receive([&](R& r) { out = std::move(r); },
               [&](caf::error& e) { throw std::runtime_error(caf::to_string(e)); });
  return out;
}

// Puts `blocks` blocks (as one sequence) into host0; returns their ids.
std::vector<triad::block_id> fill(caf::scoped_actor& self, const triad::kv_store& kv,
                                  std::size_t blocks, std::size_t block_tokens,
                                  std::size_t block_bytes, triad::token first) {
  triad::kv_put put;
  put.pool = "host0";
  put.tokens = tokens_of(blocks * block_tokens, first);
  std::mt19937 rng{7};
  for (std::size_t i = 0; i < blocks; ++i) {
    std::vector<std::uint8_t> p(block_bytes);
    for (auto& b : p)
      b = static_cast<std::uint8_t>(rng());
    put.payloads.push_back(std::move(p));
  }
  auto r = ask<triad::kv_reply>(self, kv.store, triad::kv_put_atom::value, std::move(put));
  if (!r.ok)
    throw std::runtime_error("put: " + r.reason);
  return r.ids;
}

// The cpu backend's paged KV cache as a backend for the stream path (send_kv / receive_kv use
// only its page calls, which cpu_backend forwards to this same cache): the pages of two cpu
// devices without their weights, which a transfer does not touch.
class page_cache_backend final : public triad::backend {
public:
  explicit page_cache_backend(std::unique_ptr<triad::paged_kv_cache> cache, triad::model_shape s)
      : cache_(std::move(cache))
      , shape_(std::move(s)) {}
  const triad::model_shape& shape() const noexcept override { return shape_; }
  std::string kernel() const override { return "pages-only"; }
  triad::expected<triad::step_output> step(std::span<const triad::step_item>) override {
    return triad::make_error(triad::errc::unsupported, "pages only");
  }
  triad::expected<std::vector<std::byte>> export_kv(triad::seq_id seq) const override {
    return cache_->export_seq(seq);
  }
  triad::expected<void> import_kv(triad::seq_id seq, std::span<const std::byte> b) override {
    return cache_->import_seq(seq, b);
  }
  void free(triad::seq_id seq) override { cache_->free(seq); }
  std::size_t attach_prefix(triad::seq_id, std::span<const triad::token>) override { return 0; }
  void publish(triad::seq_id, std::span<const triad::token>) override {}
  std::size_t length(triad::seq_id seq) const noexcept override { return cache_->length(seq); }
  triad::kv_usage kv() const noexcept override { return cache_->usage(); }
  std::vector<triad::page_range> stream_groups() const override { return cache_->layer_groups(); }
  std::vector<std::span<std::byte>> page_memory(triad::seq_id seq) override {
    return cache_->page_memory(seq);
  }
  triad::expected<void> reserve_kv(triad::seq_id seq, std::size_t length) override {
    return cache_->reserve_seq(seq, length);
  }

private:
  std::unique_ptr<triad::paged_kv_cache> cache_;
  triad::model_shape shape_;
};

// One device's pages for the small preset (bf16), `pages` of them, in an arena of `domain`.
std::unique_ptr<page_cache_backend> device_pages(const triad::model_shape& shape, unsigned domain,
                                                 std::size_t page_tokens, std::size_t pages) {
  const auto page_bytes =
      static_cast<std::size_t>(shape.kv_bytes_per_token(triad::dtype::bf16)) * page_tokens;
  auto ar = triad::arena::create(domain, (pages + 1) * page_bytes, nullptr);
  if (!ar)
    throw std::runtime_error(ar.error().message);
  auto cache = triad::paged_kv_cache::create(shape, triad::dtype::bf16, page_tokens,
                                             (pages + 1) * page_bytes, *ar);
  if (!cache)
    throw std::runtime_error(cache.error().message);
  return std::make_unique<page_cache_backend>(std::move(*cache), shape);
}

// Per rep, the seconds of the live path's transfer (the sender's first group to the receiver's
// last, checked) and of memcpy of the same pages between the same two devices' memory.
struct live_times {
  std::vector<double> stream_s, memcpy_s, lease_s, send_s;
};

// A stream through `pages` blocks leased from `pool` of `kv`, sealed into the store when let go,
// as the node's tier makes them (actors/kv_link.cpp).
std::shared_ptr<triad::kv_stream> leased_stream(caf::scoped_actor& self, const triad::kv_store& kv,
                                                const std::string& pool, std::size_t pages) {
  triad::kv_lease lease;
  self->request(kv.store, 120s, triad::kv_reserve_atom::value, pool,
                static_cast<std::uint32_t>(pages))
      .receive([&](triad::kv_lease& l) { lease = std::move(l); },
               [&](caf::error& e) { throw std::runtime_error(caf::to_string(e)); });
  if (!lease.ok)
    throw std::runtime_error("lease: " + lease.reason);
  return std::make_shared<triad::kv_stream>(
      std::move(lease.memory), [to = kv.store, ids = lease.ids](std::vector<std::uint64_t> sums,
                                                                std::vector<triad::token> tk) {
        caf::anon_send(to, triad::kv_seal_atom::value, ids, std::move(tk), std::move(sums));
      });
}

} // namespace

namespace {

// -- prefix reuse on the live path --

// What the multi-turn agent workload served from caches, against a perfect cache.
struct prefix_result {
  std::uint64_t served = 0;        // prompt tokens whose KV came from a device's cache or the store
  std::uint64_t perfect = 0;       // prompt tokens a cache that forgets nothing would have served
  std::uint64_t prompt = 0;        // prompt tokens in all
  std::uint64_t from_store = 0;    // of `served`, tokens the devices read from the store
  std::uint64_t from_peer = 0;     // of `from_store`, copied from another device's memory
  std::uint64_t spilled_pages = 0; // pages the devices handed to the store
  std::size_t device_pages = 0;    // KV pages of one device
  std::size_t requests = 0;
};

// `sessions` agent sessions of `turns` turns each on a node of `config` (the clients keep no
// session on the node: each turn sends the whole conversation): every turn's prompt is the
// shared system prompt, the conversation so far (each earlier turn's question and the model's
// greedy answer, as generated) and a new question ending in the agent's cue, so a perfect cache
// serves all of it but the question. The sessions take turns round robin.
prefix_result prefix_workload(std::size_t sessions, std::size_t turns,
                              const triad::node_config& config) {
  auto started = triad::node::start(config);
  if (!started)
    throw std::runtime_error{started.error().message};
  auto& n = **started;
  const std::size_t pt = config.model.page_tokens;
  const std::string system = "You are a careful coding agent working in a large repository. "
                             "Read before you write; run the tests after every change.";
  std::vector<std::string> conversation(sessions, system);
  std::unordered_set<triad::block_hash> seen; // every full page any device computed
  prefix_result out;
  for (std::size_t turn = 0; turn < turns; ++turn)
    for (std::size_t s = 0; s < sessions; ++s) {
      auto& text = conversation[s];
      text += " [user " + std::to_string(s) + "." + std::to_string(turn) + "] Look at module " +
              std::to_string(s * 31 + turn * 7) + " and report. [agent] ";
      std::vector<triad::token> tokens{triad::tokenizer::bos};
      triad::tokenizer{}.encode_to(tokens, text, false);
      auto chain = triad::chain_hashes(tokens, pt);
      std::size_t hit = 0;
      while (hit < chain.size() && (hit + 1) * pt < tokens.size() && seen.count(chain[hit]))
        ++hit;
      out.perfect += hit * pt;
      out.prompt += tokens.size();
      triad::chat_request r;
      r.raw_prompt = text;
      r.max_tokens = 24;
      r.sampling.temperature = 0;
      std::promise<triad::request_event> done;
      std::string answer;
      std::vector<triad::token> generated;
      n.submit(r, [&](const triad::request_event& e) {
        if (e.kind == triad::request_event::token) {
          answer += e.text;
          generated.push_back(e.tok);
        } else if (e.kind == triad::request_event::done || e.kind == triad::request_event::error)
          done.set_value(e);
      });
      auto last = done.get_future().get();
      if (last.kind != triad::request_event::done)
        throw std::runtime_error{"request failed: " + last.message};
      out.served += last.usage.cached_tokens;
      ++out.requests;
      // What the devices computed is what a perfect cache keeps: the prompt and the answer's
      // tokens but the last (sampled, never computed: the request ended). The next prompt
      // holds the answer's text, which gives other tokens where the model chose a special one.
      if (!generated.empty())
        tokens.insert(tokens.end(), generated.begin(), generated.end() - 1);
      for (auto h : triad::chain_hashes(tokens, pt))
        seen.insert(h);
      text += answer; // the next turn's prompt holds the answer as generated
    }
  {
    caf::scoped_actor self{n.domains().orchestration().system()};
    for (const auto& [name, device] : n.devices())
      self->request(device, std::chrono::seconds{30}, triad::stats_atom::value)
          .receive(
              [&](triad::device_stats& st) {
                out.from_store += st.tier_tokens;
                out.from_peer += st.peer_tokens;
                out.spilled_pages += st.spilled_pages;
                out.device_pages = std::max(out.device_pages, st.kv_pages_total);
              },
              [](caf::error&) {});
  } // the scoped actor goes before its domain stops
  n.stop();
  return out;
}

int run(int argc, char** argv) {
  CLI::App app{"triad-bench-kv: KV store transfers against memcpy, block operation rate, and "
               "memory per block actor"};
  triad::bench::common_options common;
  auto& json_path = common.json_path;
  auto& quick = common.quick;
  triad::bench::add_common_options(app, common, "smaller inputs");
  CLI11_PARSE(app, argc, argv);

  auto small = triad::model_preset("small");
  if (!small) {
    std::fprintf(stderr, "triad-bench-kv: %s\n", small.error().message.c_str());
    return 1;
  }
  const std::size_t block_tokens = triad::defaults::kvstore::block_tokens;
  const std::size_t block_bytes =
      static_cast<std::size_t>(small->kv_bytes_per_token(triad::dtype::bf16)) * block_tokens;
  const std::size_t transfer_blocks = quick ? 128 : 512;
  const int reps = quick ? 101 : 201;
  const std::size_t op_rounds = quick ? 4000 : 20000;
  const std::size_t actor_blocks = quick ? 20000 : 100000;

  triad::bench::report out;
  out.quick = quick;
  try {
    auto node = start_node();
    caf::scoped_actor self{node.domains->orchestration().system()};
    const auto idle = running_actors(*node.domains);

    // Memory per block actor (first, before other phases free memory this one would reuse):
    // resident growth over `actor_blocks` stored blocks of 64 bytes, less the payload slots
    // (reserved up front, touched as blocks fill them).
    {
      const std::size_t tiny = 64;
      auto kv = start_store(node, block_tokens, tiny, actor_blocks);
      auto before = resident_bytes();
      std::size_t batch = 1000;
      for (std::size_t done = 0; done < actor_blocks; done += batch)
        fill(self, kv, batch, block_tokens, tiny, static_cast<triad::token>(done * block_tokens));
      auto st = ask<triad::kv_store_stats>(self, kv.store, triad::kv_stats_atom::value);
      auto after = resident_bytes();
      auto per_block = static_cast<double>(after - before) / static_cast<double>(st.blocks) -
                       static_cast<double>(tiny);
      out.metrics["bytes_per_block_actor"] = per_block;
      out.metrics["blocks_measured"] = st.blocks;
      out.ratios["block_actor_bytes_over_small_block_payload"] =
          per_block / static_cast<double>(block_bytes);
      caf::anon_send_exit(kv.store, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(kv.index, caf::exit_reason::user_shutdown);
      self->wait_for(kv.store);
      settle(*node.domains, idle);
    }
    // Transfers: the same blocks back and forth between host0 (domain 0) and host1 (domain 1).
    {
      auto kv = start_store(node, block_tokens, block_bytes, transfer_blocks);
      auto ids = fill(self, kv, transfer_blocks, block_tokens, block_bytes, 1);
      // The baseline copies between memory of the same kind as the pools': a buffer from an
      // arena of each domain (pages of the same size, equally aligned, first touched here).
      std::vector<triad::arena_buffer> sides;
      for (unsigned d : {0U, 1U}) {
        auto ar = triad::arena::create(d, transfer_blocks * block_bytes, nullptr);
        if (!ar)
          throw std::runtime_error(ar.error().message);
        auto buf = (*ar)->allocate(transfer_blocks * block_bytes);
        if (!buf)
          throw std::runtime_error(buf.error().message);
        std::memset(buf->data(), static_cast<int>(d + 1), buf->size());
        sides.push_back(std::move(*buf));
      }
      // Each domain's worker on a cpu of its own, and each direction's baseline copied by the
      // worker that copies for the store in that direction: the two vCPUs of this machine copy
      // at different speeds (13-14 against 22-26 GB/s measured with taskset -c 0 and -c 1), so
      // a baseline on another thread measured which cpu each thread ran on.
      auto cpus = allowed_cpus();
      std::array<triad::domain*, 2> doms{};
      for (unsigned d : {0U, 1U}) {
        auto dom = node.domains->find(d);
        if (!dom)
          throw std::runtime_error(dom.error().message);
        doms[d] = *dom;
        auto cpu = cpus[d % cpus.size()];
        if (!in_domain<bool>(*doms[d], [cpu] { return pin_this_thread(cpu); }))
          throw std::runtime_error("cannot pin domain " + std::to_string(d) + "'s worker to cpu " +
                                   std::to_string(cpu));
        out.metrics["domain" + std::to_string(d) + "_cpu"] = cpu;
      }
      // One untimed round trip first: pool pages and the movers are touched once, as the
      // buffers of the baseline are by its first rep.
      for (auto pool : {"host1", "host0"}) {
        auto m = ask<triad::kv_reply>(self, kv.store, triad::kv_transfer_atom::value, ids,
                                      std::string{pool});
        if (!m.ok)
          throw std::runtime_error("transfer: " + m.reason);
      }
      // By destination domain: transfers asked by an actor in the store's domain (as the
      // node's request and device actors ask), the same asked from this (non-actor) thread,
      // and the baseline.
      std::array<std::vector<double>, 2> store_s, thread_s, memcpy_s;
      for (int r = 0; r < 4 * reps; ++r) {
        unsigned to = r % 2 == 0 ? 1 : 0;
        std::string pool = to == 1 ? "host1" : "host0";
        if (r % 4 >= 2) {
          auto t0 = clock_type::now();
          auto m = ask<triad::kv_reply>(self, kv.store, triad::kv_transfer_atom::value, ids, pool);
          thread_s[to].push_back(seconds_since(t0));
          if (!m.ok)
            throw std::runtime_error("transfer: " + m.reason);
          continue;
        }
        store_s[to].push_back(timed_transfer(node.domains->orchestration(), kv.store, ids, pool));
        std::byte* dst = sides[to].data();
        const std::byte* src = sides[1 - to].data();
        memcpy_s[to].push_back(in_domain<double>(*doms[to], [&] {
          auto t1 = clock_type::now();
          for (std::size_t i = 0; i < transfer_blocks; ++i)
            std::memcpy(dst + i * block_bytes, src + i * block_bytes, block_bytes);
          return seconds_since(t1);
        }));
      }
      auto bytes = static_cast<double>(transfer_blocks * block_bytes);
      out.metrics["block_bytes"] = block_bytes;
      out.metrics["transfer_blocks"] = transfer_blocks;
      double worst = 0;
      for (unsigned to : {0U, 1U}) {
        auto name = std::string{"_into_domain"} + std::to_string(to);
        auto ratio = triad::bench::median(memcpy_s[to]) / triad::bench::median(store_s[to]);
        out.metrics["transfer_gb_per_s" + name] = bytes / triad::bench::median(store_s[to]) / 1e9;
        out.metrics["memcpy_gb_per_s" + name] = bytes / triad::bench::median(memcpy_s[to]) / 1e9;
        out.metrics["host_transfer_over_memcpy" + name] = ratio;
        out.metrics["host_transfer_over_memcpy_thread_client" + name] =
            triad::bench::median(memcpy_s[to]) / triad::bench::median(thread_s[to]);
        worst = to == 0 ? ratio : std::min(worst, ratio);
      }
      out.ratios["host_transfer_over_memcpy"] = worst;
      caf::anon_send_exit(kv.store, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(kv.index, caf::exit_reason::user_shutdown);
      self->wait_for(kv.store);
      settle(*node.domains, idle);
    }

    // The live path: a prompt's KV from a prefill device's pages to a decode device's, through
    // leased host blocks of the store, in layer groups (send_kv on the sender's driver thread,
    // receive_kv on the receiver's, each bound to a cpu of its own), as the node moves it.
    {
      const std::size_t pt = block_tokens;
      const std::size_t seq_pages = quick ? 64 : 128; // 1024 or 2048 prompt tokens
      const std::size_t page_bytes = block_bytes;
      auto kv = start_store(node, pt, page_bytes, seq_pages + 1);
      auto sender = device_pages(*small, 0, pt, seq_pages);
      auto receiver = device_pages(*small, 1, pt, seq_pages);
      std::vector<triad::token> toks(seq_pages * pt);
      for (std::size_t i = 0; i < toks.size(); ++i)
        toks[i] = static_cast<triad::token>(i % 300);
      if (auto ok = sender->reserve_kv(1, toks.size()); !ok)
        throw std::runtime_error(ok.error().message);
      std::mt19937 rng{11};
      for (auto page : sender->page_memory(1))
        for (auto& b : page)
          b = static_cast<std::byte>(rng());
      auto cpus = allowed_cpus();
      const int live_reps = quick ? 41 : 101;
      // Both directions between the two cpus (this VM's two vCPUs copy at different speeds):
      // the headline is the worse.
      double worst = 0;
      for (int dir = 0; dir < 2; ++dir) {
        const unsigned send_cpu = cpus[dir % cpus.size()], recv_cpu = cpus[(dir + 1) % cpus.size()];
        live_times t;
        for (int r = 0; r < live_reps + 1; ++r) { // the first rep touches everything: untimed
          auto l0 = clock_type::now();
          auto stream = leased_stream(self, kv, "host1", seq_pages);
          const double lease_s = seconds_since(l0);
          std::atomic<bool> announced{false};
          clock_type::time_point start, end, send_end;
          triad::expected<void> got{}, sent{};
          std::thread recv{[&] {
            pin_this_thread(recv_cpu);
            while (!announced.load(std::memory_order_acquire))
              _mm_pause();
            got = triad::receive_kv(*receiver, 2, *stream);
            end = clock_type::now();
          }};
          std::thread send{[&] {
            pin_this_thread(send_cpu);
            std::this_thread::sleep_for(1ms); // both threads settled on their cpus
            start = clock_type::now();
            sent = triad::send_kv(*sender, 1, toks, *stream,
                                  [&] { announced.store(true, std::memory_order_release); });
            send_end = clock_type::now();
            if (!sent) {
              stream->abort(); // the receiver stops waiting
              announced.store(true, std::memory_order_release);
            }
          }};
          send.join();
          recv.join();
          if (!sent)
            throw std::runtime_error("send: " + sent.error().message);
          if (!got)
            throw std::runtime_error("receive: " + got.error().message);
          stream.reset(); // sealed: the blocks stay cached, the next lease evicts them
          // The baseline: the same pages copied between the two devices' memory, on the cpu that
          // receives.
          auto from = sender->page_memory(1);
          auto into = receiver->page_memory(2);
          double copy_s = 0;
          std::thread base{[&] {
            pin_this_thread(recv_cpu);
            auto t1 = clock_type::now();
            for (std::size_t p = 0; p < from.size(); ++p)
              std::memcpy(into[p].data(), from[p].data(), page_bytes);
            copy_s = seconds_since(t1);
          }};
          base.join();
          receiver->free(2);
          if (r == 0)
            continue;
          t.stream_s.push_back(std::chrono::duration<double>(end - start).count());
          t.memcpy_s.push_back(copy_s);
          t.lease_s.push_back(lease_s);
          t.send_s.push_back(std::chrono::duration<double>(send_end - start).count());
        }
        auto bytes = static_cast<double>(seq_pages * page_bytes);
        auto stream_med = triad::bench::median(t.stream_s);
        auto memcpy_med = triad::bench::median(t.memcpy_s);
        auto name = "_cpu" + std::to_string(send_cpu) + "_to_cpu" + std::to_string(recv_cpu);
        out.metrics["live_transfer_gb_per_s" + name] = bytes / stream_med / 1e9;
        out.metrics["live_memcpy_gb_per_s" + name] = bytes / memcpy_med / 1e9;
        out.metrics["live_lease_us" + name] = triad::bench::median(t.lease_s) * 1e6;
        // The sender's part: its copy into the blocks, from its first piece to its last.
        out.metrics["live_send_gb_per_s" + name] = bytes / triad::bench::median(t.send_s) / 1e9;
        out.metrics["live_transfer_over_memcpy" + name] = memcpy_med / stream_med;
        worst = dir == 0 ? memcpy_med / stream_med : std::min(worst, memcpy_med / stream_med);
      }
      out.metrics["live_transfer_pages"] = seq_pages;
      out.metrics["live_transfer_layer_groups"] = sender->stream_groups().size();
      out.ratios["transfer_over_memcpy"] = worst;
      caf::anon_send_exit(kv.store, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(kv.index, caf::exit_reason::user_shutdown);
      self->wait_for(kv.store);
      settle(*node.domains, idle);
    }

    // The same path between two simulated devices (SIMULATED links): an H200 prefill device
    // and an SN40L decode device, llama3-8b's KV, each layer group waiting its share of the KV
    // bytes' time over each device's link. The wall time against the two hops one after the
    // other says how much of them overlapped.
    {
      auto shape = triad::model_preset("llama3-8b");
      auto h200 = triad::builtin_profile("h200");
      auto sn40l = triad::builtin_profile("sn40l");
      if (!shape || !h200 || !sn40l)
        throw std::runtime_error("sim stream: a preset or profile is missing");
      const std::size_t pt = block_tokens;
      const std::size_t seq_pages = 256; // a 4096-token prompt
      const double time_scale = 0.05; // modelled seconds run 20 times as long: sleeps above noise
      auto make = [&](const triad::device_profile& prof) {
        triad::sim_backend_options o;
        o.shape = *shape;
        o.profile = prof;
        o.page_tokens = pt;
        o.time_scale = time_scale;
        o.kv_budget_bytes = static_cast<std::uint64_t>(seq_pages + 8) * pt *
                            shape->kv_bytes_per_token(triad::dtype::bf16);
        auto b = triad::sim_backend::create(o);
        if (!b)
          throw std::runtime_error(b.error().message);
        return std::move(*b);
      };
      auto sender = make(*h200);
      auto receiver = make(*sn40l);
      const std::size_t sim_block = sender->page_payload_bytes();
      auto kv = start_store(node, pt, sim_block, seq_pages + 1);
      std::vector<triad::token> toks(seq_pages * pt, 7);
      if (auto ok = sender->reserve_kv(1, toks.size()); !ok) // the prefilled prompt's pages
        throw std::runtime_error(ok.error().message);
      auto stream = leased_stream(self, kv, "host1", seq_pages);
      std::atomic<bool> announced{false};
      triad::expected<void> got{}, sent{};
      clock_type::time_point start, end;
      std::thread recv{[&] {
        while (!announced.load(std::memory_order_acquire))
          std::this_thread::yield();
        got = triad::receive_kv(*receiver, 2, *stream);
        end = clock_type::now();
      }};
      start = clock_type::now();
      sent = triad::send_kv(*sender, 1, toks, *stream,
                            [&] { announced.store(true, std::memory_order_release); });
      if (!sent) {
        stream->abort();
        announced.store(true);
      }
      recv.join();
      if (!sent || !got)
        throw std::runtime_error("sim stream: " +
                                 (!sent ? sent.error().message : got.error().message));
      const auto groups = sender->stream_groups().size();
      const double out_s = sender->stream_group_seconds(seq_pages) * groups * time_scale;
      const double in_s = receiver->stream_group_seconds(seq_pages) * groups * time_scale;
      const double wall_s = std::chrono::duration<double>(end - start).count() * time_scale;
      out.metrics["sim_stream_out_seconds"] = out_s; // modelled seconds
      out.metrics["sim_stream_in_seconds"] = in_s;
      out.metrics["sim_stream_seconds"] = wall_s;
      out.metrics["sim_stream_layer_groups"] = groups;
      out.metrics["sim_stream_kv_bytes"] =
          static_cast<double>(seq_pages * pt) * shape->kv_bytes_per_token(triad::dtype::bf16);
      // 1: no overlap (one hop after the other); the pipelined bound is the slower hop plus
      // one group of the faster.
      out.metrics["sim_stream_over_two_hops"] = wall_s / (out_s + in_s);
      out.metrics["sim_stream_pipelined_bound_over_two_hops"] =
          (std::max(out_s, in_s) + std::min(out_s, in_s) / static_cast<double>(groups)) /
          (out_s + in_s);
      stream.reset();
      caf::anon_send_exit(kv.store, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(kv.index, caf::exit_reason::user_shutdown);
      self->wait_for(kv.store);
      settle(*node.domains, idle);
    }

    // Block operations: pipelined round trips of put, acquire, lookup and free.
    {
      const std::size_t op_bytes = 4096;
      auto kv = start_store(node, block_tokens, op_bytes, op_rounds + 16);
      auto t0 = clock_type::now();
      for (std::size_t i = 0; i < op_rounds; ++i)
        self->send(kv.store, triad::kv_put_atom::value,
                   triad::kv_put{"host0",
                                 tokens_of(block_tokens, static_cast<triad::token>(i * 97)),
                                 {std::vector<std::uint8_t>(op_bytes, 1)}});
      std::vector<triad::block_id> ids;
      for (std::size_t i = 0; i < op_rounds; ++i)
        self->receive([&](triad::kv_reply& r) {
          if (!r.ok)
            throw std::runtime_error("put: " + r.reason);
          ids.push_back(r.ids[0]);
        });
      for (auto id : ids)
        self->send(kv.store, triad::kv_acquire_atom::value, std::vector<triad::block_id>{id});
      for (std::size_t i = 0; i < op_rounds; ++i)
        self->receive([](triad::kv_reply&) {});
      for (std::size_t i = 0; i < op_rounds; ++i)
        self->send(kv.index, triad::kv_lookup_atom::value,
                   tokens_of(block_tokens, static_cast<triad::token>(i * 97)));
      std::size_t hits = 0;
      for (std::size_t i = 0; i < op_rounds; ++i)
        self->receive([&](triad::kv_prefix& p) { hits += p.tokens > 0; });
      for (auto id : ids)
        self->send(kv.store, triad::kv_free_atom::value, std::vector<triad::block_id>{id, id});
      for (std::size_t i = 0; i < op_rounds; ++i)
        self->receive([](triad::kv_reply&) {});
      auto secs = seconds_since(t0);
      out.metrics["block_ops_per_s"] = static_cast<double>(4 * op_rounds) / secs;
      out.metrics["lookup_hit_fraction"] =
          static_cast<double>(hits) / static_cast<double>(op_rounds);
      caf::anon_send_exit(kv.store, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(kv.index, caf::exit_reason::user_shutdown);
      self->wait_for(kv.store);
      settle(*node.domains, idle);
    }

    // Prefix reuse on the live path: a multi-turn agent workload whose sessions outgrow the
    // device (one cpu device with 2 MiB of KV: 16 or 32 pages, f32 or bf16), with the KV store
    // and without; then the same on the three-stage default (a prefill and a decode device:
    // the decode device holds the pages of the answers it generated, which the prefill device
    // copies from its memory when the next turn comes).
    {
      const std::size_t sessions = quick ? 6 : 12, turns = quick ? 4 : 6;
      auto with = prefix_workload(sessions, turns, triad::small_kv_config(64));
      auto without = prefix_workload(sessions, turns, triad::small_kv_config(0));
      auto ratio = [](const prefix_result& r) {
        return r.perfect == 0 ? 0.0
                              : static_cast<double>(r.served) / static_cast<double>(r.perfect);
      };
      auto three_stage = [](std::uint64_t host_mib) {
        auto c = triad::default_config();
        c.topology.bind_threads = false;
        c.kvstore.host_mib = host_mib;
        return c;
      };
      auto split = prefix_workload(sessions, turns, three_stage(64));
      auto split_without = prefix_workload(sessions, turns, three_stage(0));
      out.metrics["prefix_three_stage_perfect_tokens"] = split.perfect;
      out.metrics["prefix_three_stage_served_tokens"] = split.served;
      out.metrics["prefix_three_stage_from_peer_tokens"] = split.from_peer;
      out.metrics["prefix_three_stage_served_tokens_without_store"] = split_without.served;
      out.metrics["prefix_hit_ratio_three_stage"] = ratio(split);
      out.metrics["prefix_hit_ratio_three_stage_without_store"] = ratio(split_without);
      out.metrics["prefix_sessions"] = sessions;
      out.metrics["prefix_turns"] = turns;
      out.metrics["prefix_device_pages"] = with.device_pages;
      out.metrics["prefix_prompt_tokens"] = with.prompt;
      out.metrics["prefix_perfect_tokens"] = with.perfect;
      out.metrics["prefix_served_tokens"] = with.served;
      out.metrics["prefix_served_from_store_tokens"] = with.from_store;
      out.metrics["prefix_spilled_pages"] = with.spilled_pages;
      out.metrics["prefix_served_tokens_without_store"] = without.served;
      out.metrics["prefix_hit_ratio_without_store"] = ratio(without);
      out.ratios["prefix_hit_ratio"] = ratio(with);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "triad-bench-kv: %s\n", e.what());
    return 1;
  }
  return out.finish(json_path);
}

} // namespace

int main(int argc, char** argv) {
  return triad::guarded_main("triad-bench-kv", argc, argv, run);
}

#include "cluster/kv_shared.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include <ucp/api/ucp.h>

#include "runtime/checksum.hpp"

namespace triad::cluster {

namespace {

// A key: this header, then the packed remote key's bytes, then the UCX worker address's.
struct key_header {
  std::uint32_t magic = 0x5452534d; // "TRSM"
  std::uint32_t version = 1;
  std::uint64_t id = 0;   // random per memory: a key never names another memory's bytes
  std::uint64_t base = 0; // its address in the holder's process
  std::uint64_t size = 0;
  std::uint32_t rkey_bytes = 0;
  std::uint32_t address_bytes = 0;
};
constexpr std::uint32_t key_magic = key_header{}.magic;
// Ranges are handed out in multiples of this (the copies' non-temporal stores want it).
constexpr std::size_t range_align = 64;
// The most memories a reader keeps mapped; the least recently used one not being read goes.
constexpr std::size_t max_mappings = 64;
// A mapping unused this long goes (its holder may be gone: its segment lives while mapped).
constexpr std::chrono::seconds idle_mapping{60};
// How long closing a mapping's endpoint may take before the worker's destruction ends it.
constexpr std::chrono::milliseconds close_grace{1000};

error ucx_error(std::string_view call, ucs_status_t status) {
  return make_error(errc::system_error,
                    "UCX " + std::string{call} + ": " + ucs_status_string(status));
}

// A UCX context restricted to shared memory, for one-sided access (mapping remote keys).
// `sysv_only`: memory it allocates comes from sysv segments or not at all: their pages come as
// they are first written (UCX's posix segments are written over whole when made, which for a
// large budget would commit all of it at every node's start).
expected<ucp_context_h> shared_context(bool sysv_only = false) {
  ucp_config_t* config = nullptr;
  if (auto st = ucp_config_read(nullptr, nullptr, &config); st != UCS_OK)
    return ucx_error("ucp_config_read", st);
  auto st = ucp_config_modify(config, "TLS", "sm,self");
  if (st == UCS_OK && sysv_only)
    st = ucp_config_modify(config, "ALLOC_PRIO", "md:sysv");
  ucp_context_h context = nullptr;
  if (st == UCS_OK) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA;
    st = ucp_init(&params, config, &context);
  }
  ucp_config_release(config);
  if (st != UCS_OK)
    return ucx_error("ucp_init (transports sm,self)", st);
  return context;
}

// Opens `s`'s context (shared_context) and a worker on it, used under its owner's lock from any
// thread; `s` (its destructor) cleans up what was opened.
template<class State>
expected<void> open_shared(State& s, bool sysv_only = false) {
  auto context = shared_context(sysv_only);
  if (!context)
    return context.error();
  s.context = *context;
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  if (auto st = ucp_worker_create(s.context, &wp, &s.worker); st != UCS_OK) {
    s.worker = nullptr;
    return ucx_error("ucp_worker_create", st);
  }
  return {};
}

} // namespace

// -- kv_shared_memory --

struct kv_shared_memory::state {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr; // readers' endpoints lead to it; it never needs progress
  ucp_mem_h memory = nullptr;
  std::byte* base = nullptr;
  std::size_t size = 0;
  std::vector<std::byte> key;

  std::mutex mtx;                          // guards what follows
  std::map<std::size_t, std::size_t> free; // offset -> length, no two adjacent

  ~state() {
    if (memory != nullptr)
      ucp_mem_unmap(context, memory);
    if (worker != nullptr)
      ucp_worker_destroy(worker);
    if (context != nullptr)
      ucp_cleanup(context);
  }
};

kv_shared_memory::kv_shared_memory(std::unique_ptr<state> s)
    : state_(std::move(s)) {}

kv_shared_memory::~kv_shared_memory() = default;

expected<std::unique_ptr<kv_shared_memory>> kv_shared_memory::open(std::size_t bytes) {
  if (bytes == 0)
    return make_error(errc::invalid_argument, "KV shared memory: 0 bytes asked for");
  auto s = std::make_unique<state>();
  if (auto opened = open_shared(*s, true); !opened)
    return opened.error();
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                  UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  mp.address = nullptr;
  mp.length = (bytes + range_align - 1) / range_align * range_align;
  mp.flags = UCP_MEM_MAP_ALLOCATE;
  if (auto st = ucp_mem_map(s->context, &mp, &s->memory); st != UCS_OK) {
    s->memory = nullptr;
    return ucx_error("ucp_mem_map (" + std::to_string(bytes) + " bytes)", st);
  }
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  if (auto st = ucp_mem_query(s->memory, &attr); st != UCS_OK)
    return ucx_error("ucp_mem_query", st);
  s->base = static_cast<std::byte*>(attr.address);
  s->size = std::min<std::size_t>(attr.length, mp.length);
  void* rkey = nullptr;
  std::size_t rkey_len = 0;
  if (auto st = ucp_rkey_pack(s->context, s->memory, &rkey, &rkey_len); st != UCS_OK)
    return ucx_error("ucp_rkey_pack", st);
  ucp_address_t* address = nullptr;
  std::size_t address_len = 0;
  if (auto st = ucp_worker_get_address(s->worker, &address, &address_len); st != UCS_OK) {
    ucp_rkey_buffer_release(rkey);
    return ucx_error("ucp_worker_get_address", st);
  }
  key_header h;
  std::random_device rd;
  h.id = std::uint64_t{rd()} << 32 | rd();
  h.base = reinterpret_cast<std::uintptr_t>(s->base);
  h.size = s->size;
  h.rkey_bytes = static_cast<std::uint32_t>(rkey_len);
  h.address_bytes = static_cast<std::uint32_t>(address_len);
  s->key.resize(sizeof h + rkey_len + address_len);
  std::memcpy(s->key.data(), &h, sizeof h);
  std::memcpy(s->key.data() + sizeof h, rkey, rkey_len);
  std::memcpy(s->key.data() + sizeof h + rkey_len, address, address_len);
  ucp_rkey_buffer_release(rkey);
  ucp_worker_release_address(s->worker, address);
  s->free.emplace(0, s->size);
  std::unique_ptr<kv_shared_memory> m{new kv_shared_memory{std::move(s)}};
  // Where UCX could only place it in memory of this process alone (no shared-memory transport
  // allocated it), another process cannot map it: found out here, not at a peer's first read.
  auto probe = kv_shared_reader::open();
  if (!probe)
    return probe.error();
  if (auto mapped = (*probe)->read(m->key(), 0, {}, block_checksum({})); !mapped)
    return make_error(errc::unsupported, "KV shared memory: UCX placed it where other processes "
                                         "cannot map it (" +
                                             mapped.error().message + ")");
  return m;
}

std::span<std::byte> kv_shared_memory::bytes() const noexcept {
  return {state_->base, state_->size};
}

std::span<const std::byte> kv_shared_memory::key() const noexcept {
  return state_->key;
}

std::optional<std::size_t>
kv_shared_memory::offset_of(std::span<const std::byte> range) const noexcept {
  const auto* b = state_->base;
  if (range.data() < b || range.data() + range.size() > b + state_->size)
    return std::nullopt;
  return static_cast<std::size_t>(range.data() - b);
}

std::optional<std::span<std::byte>> kv_shared_memory::allocate(std::size_t n) {
  auto& s = *state_;
  n = std::max<std::size_t>(range_align, (n + range_align - 1) / range_align * range_align);
  std::lock_guard lock{s.mtx};
  for (auto it = s.free.begin(); it != s.free.end(); ++it) // first fit: low ranges stay warm
    if (it->second >= n) {
      const auto [at, len] = *it;
      s.free.erase(it);
      if (len > n)
        s.free.emplace(at + n, len - n);
      return std::span<std::byte>{s.base + at, n};
    }
  return std::nullopt;
}

void kv_shared_memory::release(std::span<std::byte> range) {
  auto& s = *state_;
  const auto at = offset_of(range);
  if (!at || range.empty())
    return;
  std::lock_guard lock{s.mtx};
  // A range that overlaps a free one was not handed out as given (or came back twice): taking
  // it in would hand the same bytes out twice.
  auto after = s.free.lower_bound(*at);
  if (after != s.free.end() && after->first < *at + range.size())
    return;
  if (after != s.free.begin())
    if (auto before = std::prev(after); before->first + before->second > *at)
      return;
  auto it = s.free.emplace_hint(after, *at, range.size());
  if (auto next = std::next(it); next != s.free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    s.free.erase(next);
  }
  if (it != s.free.begin())
    if (auto prev = std::prev(it); prev->first + prev->second == it->first) {
      prev->second += it->second;
      s.free.erase(it);
    }
}

// -- kv_shared_reader --

namespace {

// One memory mapped into this process: the endpoint to its holder's worker, the unpacked
// remote key, and where its bytes appear here.
struct mapping {
  std::vector<std::byte> key; // the whole key it was mapped by
  ucp_ep_h ep = nullptr;
  ucp_rkey_h rkey = nullptr;
  const std::byte* bytes = nullptr;
  std::size_t size = 0;
  std::uint64_t last_use = 0;
  std::chrono::steady_clock::time_point used_at;
};

} // namespace

struct kv_shared_reader::state {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::mutex mtx;                                           // guards the worker and what follows
  std::map<std::uint64_t, std::shared_ptr<mapping>> mapped; // by the memory's id
  kv_shared_reader::fault injected = kv_shared_reader::fault::none;
  std::uint64_t uses = 0;

  ~state() {
    for (auto& [k, m] : mapped)
      unmap(*m);
    if (worker != nullptr)
      ucp_worker_destroy(worker);
    if (context != nullptr)
      ucp_cleanup(context);
  }

  // Destroys the remote key (the segment is detached) and closes the endpoint, bounded
  // (with mtx held).
  void unmap(mapping& m) {
    if (m.rkey != nullptr)
      ucp_rkey_destroy(m.rkey);
    m.rkey = nullptr;
    if (m.ep == nullptr)
      return;
    ucp_request_param_t p{};
    void* req = ucp_ep_close_nbx(m.ep, &p);
    m.ep = nullptr;
    if (req == nullptr || UCS_PTR_IS_ERR(req))
      return;
    const auto until = std::chrono::steady_clock::now() + close_grace;
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           std::chrono::steady_clock::now() < until)
      ucp_worker_progress(worker);
    ucp_request_free(req); // still under way: the worker's destruction ends it
  }

  // The mapping of the memory `key` names, made at its first use (with mtx held).
  expected<std::shared_ptr<mapping>> map(std::span<const std::byte> key) {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = mapped.begin(); it != mapped.end();) // idle ones nobody reads go
      if (auto at = it++; at->second.use_count() == 1 && now - at->second->used_at > idle_mapping) {
        unmap(*at->second);
        mapped.erase(at);
      }
    key_header h;
    if (key.size() < sizeof h)
      return make_error(errc::parse_error, "KV shared memory: a key of " +
                                               std::to_string(key.size()) + " bytes is not one");
    std::memcpy(&h, key.data(), sizeof h);
    if (h.magic != key_magic || h.version != 1 ||
        key.size() != sizeof h + std::size_t{h.rkey_bytes} + h.address_bytes || h.rkey_bytes == 0 ||
        h.address_bytes == 0)
      return make_error(errc::parse_error, "KV shared memory: a key that is not one (bad magic, "
                                           "version or lengths)");
    if (auto it = mapped.find(h.id); it != mapped.end()) {
      if (std::equal(key.begin(), key.end(), it->second->key.begin(), it->second->key.end())) {
        it->second->last_use = ++uses;
        it->second->used_at = now;
        return it->second;
      }
      if (it->second.use_count() > 1) // another memory under the same id, being read
        return make_error(errc::io_error,
                          "KV shared memory: two memories share the id " + std::to_string(h.id));
      unmap(*it->second);
      mapped.erase(it);
    }
    if (injected == kv_shared_reader::fault::cannot_map)
      return make_error(errc::io_error, "KV shared memory: cannot map it (fault injected)");
    auto m = std::make_shared<mapping>();
    m->key.assign(key.begin(), key.end());
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(key.data() + sizeof h + h.rkey_bytes);
    if (auto st = ucp_ep_create(worker, &ep, &m->ep); st != UCS_OK) {
      m->ep = nullptr;
      return make_error(errc::io_error, std::string{"KV shared memory: no endpoint to its "
                                                    "holder: "} +
                                            ucs_status_string(st));
    }
    auto failed = [&](std::string_view call, ucs_status_t st) {
      unmap(*m);
      return make_error(errc::io_error,
                        "KV shared memory: " + std::string{call} + ": " + ucs_status_string(st));
    };
    if (auto st = ucp_ep_rkey_unpack(m->ep, key.data() + sizeof h, &m->rkey); st != UCS_OK) {
      m->rkey = nullptr;
      return failed("ucp_ep_rkey_unpack", st);
    }
    void* local = nullptr;
    if (auto st = ucp_rkey_ptr(m->rkey, h.base, &local); st != UCS_OK)
      return failed("ucp_rkey_ptr", st);
    m->bytes = static_cast<const std::byte*>(local);
    m->size = h.size;
    m->last_use = ++uses;
    m->used_at = now;
    if (mapped.size() >= max_mappings) { // the least recently used one nobody reads goes
      auto old = mapped.end();
      for (auto it = mapped.begin(); it != mapped.end(); ++it)
        if (it->second.use_count() == 1 &&
            (old == mapped.end() || it->second->last_use < old->second->last_use))
          old = it;
      if (old != mapped.end()) {
        unmap(*old->second);
        mapped.erase(old);
      }
    }
    mapped.emplace(h.id, m);
    return m;
  }
};

kv_shared_reader::kv_shared_reader(std::unique_ptr<state> s)
    : state_(std::move(s)) {}

kv_shared_reader::~kv_shared_reader() = default;

expected<std::unique_ptr<kv_shared_reader>> kv_shared_reader::open(fault injected) {
  auto s = std::make_unique<state>();
  s->injected = injected;
  if (auto opened = open_shared(*s); !opened)
    return opened.error();
  return std::unique_ptr<kv_shared_reader>{new kv_shared_reader{std::move(s)}};
}

expected<void> kv_shared_reader::read(std::span<const std::byte> key, std::uint64_t offset,
                                      std::span<std::byte> into, std::uint64_t checksum) {
  auto& s = *state_;
  std::shared_ptr<mapping> m;
  {
    std::lock_guard lock{s.mtx};
    auto got = s.map(key);
    if (!got)
      return got.error();
    m = std::move(*got);
  }
  if (offset > m->size || into.size() > m->size - offset)
    return make_error(errc::invalid_argument, "KV shared memory: " + std::to_string(into.size()) +
                                                  " bytes at offset " + std::to_string(offset) +
                                                  " lie past its end (" + std::to_string(m->size) +
                                                  " bytes)");
  return copy_checked(into, {m->bytes + offset, into.size()}, checksum);
}

} // namespace triad::cluster

#include "runtime/memory.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>

#include <hwloc.h>
#include <mimalloc.h>

namespace triad {

allocator_info process_allocator() {
  allocator_info info;
  info.name = "mimalloc";
  info.version = mi_version();
  void* probe = std::malloc(64);
  info.malloc_is_mimalloc = mi_is_in_heap_region(probe);
  std::free(probe);
  return info;
}

arena_buffer::arena_buffer(arena_buffer&& other) noexcept
    : owner_(std::move(other.owner_))
    , data_(std::exchange(other.data_, nullptr))
    , size_(std::exchange(other.size_, 0)) {}

arena_buffer& arena_buffer::operator=(arena_buffer&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::move(other.owner_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

arena_buffer::~arena_buffer() {
  release();
}

void arena_buffer::release() noexcept {
  if (data_ != nullptr && owner_ != nullptr)
    owner_->give_back(data_, size_);
  data_ = nullptr;
  size_ = 0;
  owner_.reset();
}

arena::arena(unsigned domain, std::uint64_t capacity, const topology* topo)
    : domain_(domain)
    , capacity_(capacity)
    , topo_(topo) {}

expected<std::shared_ptr<arena>> arena::create(unsigned domain, std::uint64_t capacity_bytes,
                                               const topology* topo) {
  if (capacity_bytes == 0)
    return make_error(errc::invalid_argument, "arena for domain " + std::to_string(domain) +
                                                  ": capacity 0; allowed: 1 byte or more");
  const topology* binder = topo != nullptr && topo->info().is_this_machine ? topo : nullptr;
  if (topo != nullptr && domain >= topo->info().domains.size())
    return make_error(errc::not_found, "arena: domain " + std::to_string(domain) +
                                           " does not exist; the topology has " +
                                           std::to_string(topo->info().domains.size()) +
                                           " domains");
  return std::shared_ptr<arena>(new arena(domain, capacity_bytes, binder));
}

expected<arena_buffer> arena::allocate(std::size_t bytes) {
  if (bytes == 0)
    return make_error(errc::invalid_argument, "arena: cannot allocate 0 bytes");
  // Reserve capacity first so concurrent allocations never overshoot the bound.
  auto used = in_use_.load();
  do {
    if (used + bytes > capacity_ || used + bytes < used) {
      refusals_.fetch_add(1, std::memory_order_relaxed);
      return make_error(errc::exhausted, "arena of domain " + std::to_string(domain_) +
                                             " is full: " + std::to_string(bytes) +
                                             " bytes asked, " + std::to_string(capacity_ - used) +
                                             " of " + std::to_string(capacity_) + " free");
    }
  } while (!in_use_.compare_exchange_weak(used, used + bytes));
  auto now = used + bytes;
  auto peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
  void* data = nullptr;
  if (topo_ != nullptr) {
    auto topo = static_cast<hwloc_topology_t>(topo_->native());
    auto* node = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, domain_);
    data = hwloc_alloc_membind(topo, bytes, node->nodeset, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET);
  } else {
    data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED)
      data = nullptr;
  }
  if (data == nullptr) {
    int err = errno;
    in_use_.fetch_sub(bytes);
    return make_error(errc::system_error, "arena of domain " + std::to_string(domain_) +
                                              ": allocating " + std::to_string(bytes) +
                                              " bytes failed: " + std::strerror(err));
  }
  allocations_.fetch_add(1, std::memory_order_relaxed);
  return arena_buffer{shared_from_this(), static_cast<std::byte*>(data), bytes};
}

void arena::give_back(std::byte* data, std::size_t size) noexcept {
  if (topo_ != nullptr)
    hwloc_free(static_cast<hwloc_topology_t>(topo_->native()), data, size);
  else
    ::munmap(data, size);
  in_use_.fetch_sub(size);
  releases_.fetch_add(1, std::memory_order_relaxed);
}

arena_stats arena::stats() const noexcept {
  arena_stats s;
  s.capacity_bytes = capacity_;
  s.in_use_bytes = in_use_.load();
  s.peak_bytes = peak_.load();
  s.allocations = allocations_.load(std::memory_order_relaxed);
  s.releases = releases_.load(std::memory_order_relaxed);
  s.refusals = refusals_.load(std::memory_order_relaxed);
  s.numa_bound = topo_ != nullptr;
  return s;
}

} // namespace triad

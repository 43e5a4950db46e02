#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/error.hpp"
#include "runtime/topology.hpp"

namespace triad {

/// Which allocator serves malloc/new in this process, and whether it is really mimalloc.
struct allocator_info {
  std::string name;                ///< "mimalloc" when linked in
  int version = 0;                 ///< mimalloc's version number, e.g. 206
  bool malloc_is_mimalloc = false; ///< true when a plain malloc() block lives in mimalloc's heap
};

/// Reports the process allocator (mimalloc is linked as the process allocator).
allocator_info process_allocator();

/// Usage of one arena, read without locking.
struct arena_stats {
  std::uint64_t capacity_bytes = 0; ///< the bound given at creation
  std::uint64_t in_use_bytes = 0;   ///< bytes of live buffers
  std::uint64_t peak_bytes = 0;     ///< highest in_use_bytes seen
  std::uint64_t allocations = 0;    ///< buffers handed out so far
  std::uint64_t releases = 0;       ///< buffers returned so far
  std::uint64_t refusals = 0;       ///< allocations refused for capacity
  bool numa_bound = false;          ///< buffers are bound to the domain's NUMA node
};

class arena;

/// A large buffer from an arena; returned to it on destruction (RAII, move-only).
class arena_buffer {
public:
  arena_buffer() = default;
  arena_buffer(arena_buffer&& other) noexcept;
  arena_buffer& operator=(arena_buffer&& other) noexcept;
  arena_buffer(const arena_buffer&) = delete;
  arena_buffer& operator=(const arena_buffer&) = delete;
  /// Returns the bytes to the arena.
  ~arena_buffer();

  /// The bytes, page-aligned.
  std::byte* data() const noexcept { return data_; }
  /// Their count, as asked for.
  std::size_t size() const noexcept { return size_; }
  /// True when the buffer holds memory.
  explicit operator bool() const noexcept { return data_ != nullptr; }

private:
  friend class arena;
  arena_buffer(std::shared_ptr<arena> owner, std::byte* data, std::size_t size)
      : owner_(std::move(owner))
      , data_(data)
      , size_(size) {}
  void release() noexcept;

  std::shared_ptr<arena> owner_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Large-buffer memory of one NUMA domain (KV blocks, weights, activations), bounded by a
/// capacity; on the real machine its pages are bound to the domain's node with hwloc.
class arena : public std::enable_shared_from_this<arena> {
public:
  /// Creates an arena for `domain` holding at most `capacity_bytes`. Binds memory when
  /// `topo` is this machine; otherwise (XML, synthetic, tests) allocates unbound pages.
  static expected<std::shared_ptr<arena>> create(unsigned domain, std::uint64_t capacity_bytes,
                                                 const topology* topo);
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;

  /// A zero-filled, page-aligned buffer of `bytes`; errc::exhausted when the arena's capacity
  /// would be exceeded (a full arena is an answer, never growth).
  expected<arena_buffer> allocate(std::size_t bytes);

  /// The NUMA domain this arena serves.
  unsigned domain() const noexcept { return domain_; }
  /// Usage so far.
  arena_stats stats() const noexcept;

private:
  friend class arena_buffer;
  arena(unsigned domain, std::uint64_t capacity, const topology* topo);
  void give_back(std::byte* data, std::size_t size) noexcept;

  unsigned domain_;
  std::uint64_t capacity_;
  const topology* topo_;
  std::atomic<std::uint64_t> in_use_{0};
  std::atomic<std::uint64_t> peak_{0};
  std::atomic<std::uint64_t> allocations_{0};
  std::atomic<std::uint64_t> releases_{0};
  std::atomic<std::uint64_t> refusals_{0};
};

} // namespace triad

#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace triad::detail {

/// A move-only `void()` callable (C++23's std::move_only_function<void()>), so jobs may own
/// buffers and promises that std::function cannot hold. A callable of up to `inline_size`
/// bytes is stored inside it: a driver job is then no allocation on the submitting thread and
/// no free on the driver thread.
class unique_function {
public:
  /// Bytes a callable may take to be stored inline (larger ones go to the heap).
  static constexpr std::size_t inline_size = 64;

  unique_function() = default;

  /// Wraps any callable invocable as `void()`.
  template<class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, unique_function>>>
  unique_function(F&& fun) {
    using D = std::decay_t<F>;
    if constexpr (stored_inline<D>)
      ::new (static_cast<void*>(storage_.bytes)) D(std::forward<F>(fun));
    else
      storage_.heap = new D(std::forward<F>(fun));
    ops_ = &ops_for<D>;
  }

  unique_function(unique_function&& other) noexcept { take(other); }

  unique_function& operator=(unique_function&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }

  unique_function(const unique_function&) = delete;
  unique_function& operator=(const unique_function&) = delete;

  ~unique_function() { reset(); }

  /// Calls the wrapped callable.
  void operator()() { ops_->call(storage_); }
  /// True when a callable is held.
  explicit operator bool() const noexcept { return ops_ != nullptr; }

private:
  union storage {
    alignas(std::max_align_t) unsigned char bytes[inline_size];
    void* heap;
  };

  struct ops {
    void (*call)(storage&);
    void (*move)(storage& from, storage& to) noexcept; // leaves `from` destroyed
    void (*destroy)(storage&) noexcept;
  };

  template<class D>
  static constexpr bool stored_inline =
      sizeof(D) <= inline_size &&
      alignof(D) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<D>;

  template<class D>
  static D& get(storage& s) noexcept {
    if constexpr (stored_inline<D>)
      return *std::launder(reinterpret_cast<D*>(s.bytes));
    else
      return *static_cast<D*>(s.heap);
  }

  template<class D>
  static constexpr ops ops_for{
      [](storage& s) { get<D>(s)(); },
      [](storage& from, storage& to) noexcept {
        if constexpr (stored_inline<D>) {
          ::new (static_cast<void*>(to.bytes)) D(std::move(get<D>(from)));
          get<D>(from).~D();
        } else {
          to.heap = from.heap;
        }
      },
      [](storage& s) noexcept {
        if constexpr (stored_inline<D>)
          get<D>(s).~D();
        else
          delete static_cast<D*>(s.heap);
      },
  };

  void take(unique_function& other) noexcept {
    if (other.ops_ == nullptr)
      return;
    other.ops_->move(other.storage_, storage_);
    ops_ = std::exchange(other.ops_, nullptr);
  }

  void reset() noexcept {
    if (ops_ != nullptr)
      std::exchange(ops_, nullptr)->destroy(storage_);
  }

  storage storage_;
  const ops* ops_ = nullptr;
};

} // namespace triad::detail

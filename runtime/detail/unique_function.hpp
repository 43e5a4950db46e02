#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace triad::detail {

/// A move-only `void()` callable (C++23's std::move_only_function<void()>), so jobs may own
/// buffers and promises that std::function cannot hold.
class unique_function {
public:
  unique_function() = default;

  /// Wraps any callable invocable as `void()`.
  template<class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, unique_function>>>
  unique_function(F&& fun)
      : impl_(std::make_unique<model<std::decay_t<F>>>(std::forward<F>(fun))) {}

  unique_function(unique_function&&) noexcept = default;
  unique_function& operator=(unique_function&&) noexcept = default;

  /// Calls the wrapped callable.
  void operator()() { impl_->call(); }
  /// True when a callable is held.
  explicit operator bool() const noexcept { return impl_ != nullptr; }

private:
  struct concept_t {
    virtual ~concept_t() = default;
    virtual void call() = 0;
  };
  template<class F>
  struct model final : concept_t {
    explicit model(F&& f)
        : fun(std::move(f)) {}
    explicit model(const F& f)
        : fun(f) {}
    void call() override { fun(); }
    F fun;
  };
  std::unique_ptr<concept_t> impl_;
};

} // namespace triad::detail

#pragma once

#include <utility>

namespace triad {

/// Runs a function when the scope ends, unless dismissed: cleanup for resources that have no
/// RAII type of their own (a raw descriptor, a half-built state to undo).
template<class F>
class scope_guard {
public:
  /// Arms the guard with `f`.
  explicit scope_guard(F f) noexcept(noexcept(F(std::move(f))))
      : f_(std::move(f)) {}
  scope_guard(const scope_guard&) = delete;
  scope_guard& operator=(const scope_guard&) = delete;
  /// Runs the function unless dismissed.
  ~scope_guard() {
    if (armed_)
      f_();
  }
  /// Keeps the function from running.
  void dismiss() noexcept { armed_ = false; }

private:
  F f_;
  bool armed_ = true;
};

/// Makes a scope_guard running `f`.
template<class F>
scope_guard<F> make_scope_guard(F f) {
  return scope_guard<F>{std::move(f)};
}

} // namespace triad

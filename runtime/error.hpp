#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace triad {

/// What kind of failure an error reports, so callers can branch without parsing text.
enum class errc {
  invalid_argument, ///< a caller-supplied value is not allowed
  not_found,        ///< a named thing (file, device, domain) does not exist
  parse_error,      ///< input text is malformed
  unsupported,      ///< the request is valid but this machine or build cannot do it
  busy,             ///< a bounded resource is full; retry later
  exhausted,        ///< a capacity limit would be exceeded
  io_error,         ///< reading or writing failed
  system_error,     ///< an OS or library call failed
  stopped,          ///< the component is shutting down and accepts no more work
  corrupted,        ///< data failed its checksum; it was not used
  timed_out,        ///< a deadline passed before the work finished
  overloaded,       ///< too much work waits already; retry after the time given
  cancelled,        ///< the caller (or its client) cancelled the work
  unavailable,      ///< nothing that could serve it is up now (no device for a stage); retry
};

/// Returns the name of an error code, e.g. "invalid_argument".
std::string_view to_string(errc code) noexcept;

/// An error as a value: a code to branch on and a message that names the problem.
struct error {
  errc code = errc::invalid_argument; ///< the kind of failure
  std::string message;                ///< human-readable: what, where, which value, what is allowed

  /// Renders "code: message".
  std::string to_string() const;
};

/// Makes an error from a code and a message.
inline error make_error(errc code, std::string message) {
  return error{code, std::move(message)};
}

/// Either a value or an error; the API-boundary result type (C++23's std::expected in spirit).
template<class T>
class [[nodiscard]] expected {
public:
  /// Holds a value.
  expected(T value)
      : state_(std::in_place_index<0>, std::move(value)) {}
  /// Holds an error.
  expected(triad::error err)
      : state_(std::in_place_index<1>, std::move(err)) {}

  /// True when a value is held.
  bool has_value() const noexcept { return state_.index() == 0; }
  /// True when a value is held.
  explicit operator bool() const noexcept { return has_value(); }

  /// The value; only valid when has_value().
  T& value() & {
    assert(has_value());
    return std::get<0>(state_);
  }
  /// The value; only valid when has_value().
  const T& value() const& {
    assert(has_value());
    return std::get<0>(state_);
  }
  /// The value, moved out; only valid when has_value().
  T&& value() && {
    assert(has_value());
    return std::get<0>(std::move(state_));
  }
  /// Access to the value's members.
  T* operator->() { return &value(); }
  /// Access to the value's members.
  const T* operator->() const { return &value(); }
  /// The value.
  T& operator*() & { return value(); }
  /// The value.
  const T& operator*() const& { return value(); }

  /// The error; only valid when !has_value().
  const triad::error& error() const& {
    assert(!has_value());
    return std::get<1>(state_);
  }

private:
  std::variant<T, triad::error> state_;
};

/// Success or an error, for operations without a result value.
template<>
class [[nodiscard]] expected<void> {
public:
  /// Success.
  expected() = default;
  /// Failure.
  expected(triad::error err)
      : err_(std::move(err))
      , ok_(false) {}

  /// True on success.
  bool has_value() const noexcept { return ok_; }
  /// True on success.
  explicit operator bool() const noexcept { return ok_; }
  /// The error; only valid on failure.
  const triad::error& error() const& {
    assert(!ok_);
    return err_;
  }

private:
  triad::error err_;
  bool ok_ = true;
};

} // namespace triad

#pragma once

#include <new>
#include <string>
#include <string_view>

#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/error.hpp"

namespace triad::detail {

/// Runs `fn` (which returns an expected) and turns what it throws into an error naming `what`:
/// dnnl::error (oneDNN could not build or run a primitive) and other exceptions as
/// errc::system_error, std::bad_alloc as errc::exhausted. The cpu backend's entry points run
/// inside it, so no exception leaves a device's driver thread.
template<class F>
auto onednn_boundary(std::string_view what, F&& fn) noexcept -> decltype(fn()) {
  try {
    return fn();
  } catch (const dnnl::error& e) {
    return make_error(errc::system_error, std::string{what} + ": oneDNN failed: " + e.what() +
                                              " (dnnl_status " +
                                              std::to_string(static_cast<int>(e.status)) + ")");
  } catch (const std::bad_alloc&) {
    return make_error(errc::exhausted, std::string{what} + ": out of memory");
  } catch (const std::exception& e) {
    return make_error(errc::system_error, std::string{what} + ": " + e.what());
  } catch (...) {
    return make_error(errc::system_error, std::string{what} + ": an unknown exception");
  }
}

} // namespace triad::detail

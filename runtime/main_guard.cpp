#include "runtime/main_guard.hpp"

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <system_error>

namespace triad {

int guarded_main(std::string_view program, int argc, char** argv, main_body body) noexcept {
  std::string what;
  try {
    return body(argc, argv);
  } catch (const std::bad_alloc&) {
    what = "out of memory (std::bad_alloc)";
  } catch (const std::system_error& e) {
    what = std::string{"system error: "} + e.what();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception of unknown type";
  }
  std::fprintf(stderr, "%.*s: fatal: %s\n", static_cast<int>(program.size()), program.data(),
               what.c_str());
  return 1;
}

} // namespace triad

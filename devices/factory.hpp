#pragma once

#include <memory>

#include "devices/backend.hpp"
#include "runtime/config.hpp"
#include "runtime/memory.hpp"

namespace triad {

/// Builds the backend a `[[devices]]` entry asks for: `cpu` runs the `[model]` preset for
/// real, `sim` models the named profile (a built-in or a `[[sim_profiles]]` entry) for the same
/// model; `cuda` is refused in this build with a message saying so. KV pages of a cpu device
/// come from `storage` (the device's domain arena), its budget is the entry's `memory_mib`.
expected<std::unique_ptr<backend>> make_backend(const node_config& node, const device_config& dev,
                                                std::shared_ptr<arena> storage);

} // namespace triad

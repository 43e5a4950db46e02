# Finds the Debian bookworm packages triad builds with (scripts/install-deps.sh
# installs them) and gives each an imported target.

# Boost 1.81 only: Debian's default libboost-*-dev is 1.74 and must not be mixed in.
find_package(Boost 1.81.0 EXACT REQUIRED CONFIG COMPONENTS json unit_test_framework)
find_package(tomlplusplus 3 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(spdlog REQUIRED)
find_package(mimalloc REQUIRED)
find_package(Threads REQUIRED)

# CAF 0.17.6 ships no CMake config or pkg-config file.
find_path(TRIAD_CAF_INCLUDE caf/all.hpp REQUIRED)
find_library(TRIAD_CAF_CORE caf_core REQUIRED)
find_library(TRIAD_CAF_IO caf_io REQUIRED)
add_library(triad_caf INTERFACE)
target_include_directories(triad_caf SYSTEM INTERFACE ${TRIAD_CAF_INCLUDE})
target_link_libraries(triad_caf INTERFACE ${TRIAD_CAF_CORE} ${TRIAD_CAF_IO} Threads::Threads)
add_library(caf::core ALIAS triad_caf)
# TLS between nodes (cluster/): CAF's OpenSSL module.
find_library(TRIAD_CAF_OPENSSL caf_openssl REQUIRED)

find_path(TRIAD_HWLOC_INCLUDE hwloc.h REQUIRED)
find_library(TRIAD_HWLOC hwloc REQUIRED)
add_library(triad_hwloc INTERFACE)
target_include_directories(triad_hwloc SYSTEM INTERFACE ${TRIAD_HWLOC_INCLUDE})
target_link_libraries(triad_hwloc INTERFACE ${TRIAD_HWLOC})
add_library(hwloc::hwloc ALIAS triad_hwloc)

find_path(TRIAD_CONCURRENTQUEUE_INCLUDE concurrentqueue/blockingconcurrentqueue.h REQUIRED)
add_library(triad_concurrentqueue INTERFACE)
target_include_directories(triad_concurrentqueue SYSTEM INTERFACE ${TRIAD_CONCURRENTQUEUE_INCLUDE})
add_library(moodycamel::concurrentqueue ALIAS triad_concurrentqueue)

# oneDNN's CMake config insists on OpenCL headers (Debian builds its GPU runtime), which the
# cpu backend does not use: find the library and headers directly.
find_path(TRIAD_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp REQUIRED)
find_library(TRIAD_DNNL dnnl REQUIRED)
find_package(OpenMP REQUIRED)
find_path(TRIAD_XXHASH_INCLUDE xxhash.h REQUIRED)
find_library(TRIAD_XXHASH xxhash REQUIRED)
# PCRE2 (8-bit, UTF and Unicode properties): the tokenizers' pre-tokenizer patterns.
find_path(TRIAD_PCRE2_INCLUDE pcre2.h REQUIRED)
find_library(TRIAD_PCRE2 pcre2-8 REQUIRED)
# UCX (its UCP layer): the KV data plane between processes and nodes (cluster/kv_wire).
find_path(TRIAD_UCX_INCLUDE ucp/api/ucp.h REQUIRED)
find_library(TRIAD_UCP ucp REQUIRED)
find_library(TRIAD_UCS ucs REQUIRED)
# ICU (its common library): the NFC normalization Qwen's tokenizer applies.
find_package(ICU REQUIRED COMPONENTS uc)


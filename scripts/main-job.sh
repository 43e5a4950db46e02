#!/usr/bin/env bash
# README command (1): installs what is missing, builds triad-node and triad-load, starts
# triad-node on the embedded default config (real cpu-backend devices with the tiny model,
# scripts allowed, no hosted tool), runs a short agentic workload against it with triad-load (agent sessions
# whose tool calls the client runs, over HTTP with streaming), prints the summary, writes the
# HTML report (build/main-job/report.html) and the run JSON, then drains the node with SIGTERM
# and checks it exited 0 with no process left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-lib.sh
jobs="${TRIAD_JOBS:-2}"
out=build/main-job

scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs" --target triad-node triad-load

mkdir -p "$out"
start=$(date +%s)
echo "== triad-node (embedded default config, any free port)"
# triad-load's agent workload forces each call's length with the triad.script extension, which
# a node accepts only when told to (--allow-scripts); its tool calls run on the client, so the
# node hosts no tool.
build/bin/triad-node --port 0 --allow-scripts > "$out/node.log" 2>&1 &
node_pid=$!
trap 'kill -KILL $node_pid 2>/dev/null || true' EXIT
wait_for_node $node_pid "$out/node.log"
port=$NODE_PORT
cat "$out/node.log"

echo "== triad-load: 6 agent sessions, 3 at a time, 2-3 client-side tool calls each"
build/bin/triad-load --url "http://127.0.0.1:$port/v1" --workload agent --requests 6 \
  --concurrency 3 --turns 1 --tool-calls uniform:2:3 --tool-ms uniform:50:300 \
  --output-tokens uniform:8:24 --system-tokens 256 --user-tokens uniform:16:48 \
  --slo-ttft-ms 3000 --slo-session-s 60 \
  --json "$out/run.json" --jsonl "$out/calls.jsonl" --html "$out/report.html"

echo "== draining triad-node (SIGTERM)"
stop_node $node_pid "$out/node.log"
trap - EXIT
tail -2 "$out/node.log"
echo "== what computed (the node's start lines):"
grep -E "^triad-node: (cpu|device)" "$out/node.log" || true
echo "== done in $(( $(date +%s) - start )) s after the build: report in $out/report.html, run in $out/run.json"

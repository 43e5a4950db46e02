#!/usr/bin/env bash
# Overload check (issue #23): a triad-node serving 4 requests at a time gets 10x that from
# triad-load (40 closed-loop chat clients) for 30 s. Every request must be answered: 200, or
# 429 / 503 with Retry-After; none may hang; the node's resident memory must stay bounded; the
# node must drain on SIGTERM and exit 0. Prints the figures and writes build/overload/run.json.
# Usage: scripts/overload.sh [SECONDS]  (needs build/bin/triad-node and triad-load)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/node-lib.sh
seconds=${1:-30}
out=build/overload
mkdir -p "$out"
cat > "$out/node.toml" <<TOML
[topology]
bind_threads = false
[limits]
max_concurrent_requests = 4
queue_timeout_ms = 2000
request_timeout_ms = 30000
[server]
port = 0
allow_scripts = true
[[devices]]
name = "prefill0"
backend = "cpu"
role = "prefill"
memory_mib = 64
[[devices]]
name = "decode0"
backend = "cpu"
role = "decode"
memory_mib = 64
TOML
build/bin/triad-node --config "$out/node.toml" > "$out/node.log" 2>&1 &
node_pid=$!
trap 'kill -KILL $node_pid 2>/dev/null || true' EXIT
wait_for_node $node_pid "$out/node.log"
port=$NODE_PORT
rss_log="$out/rss_kib.txt"
: > "$rss_log"
( while kill -0 $node_pid 2>/dev/null; do
    awk '/VmRSS/ {print $2}' /proc/$node_pid/status >> "$rss_log" 2>/dev/null || true
    sleep 1
  done ) &
sampler=$!
echo "== triad-load: 40 clients against 4 slots for $seconds s"
build/bin/triad-load --url "http://127.0.0.1:$port/v1" --workload chat --concurrency 40 \
  --requests 1000000 --duration "$seconds" --input-tokens uniform:32:256 \
  --output-tokens uniform:8:32 --json "$out/run.json" --jsonl "$out/calls.jsonl"
stop_node $node_pid "$out/node.log"
trap - EXIT
kill $sampler 2>/dev/null || true
python3 - "$out" <<'PY'
import json, sys, collections
out = sys.argv[1]
calls = [json.loads(l) for l in open(f"{out}/calls.jsonl")]
kinds = collections.Counter(c.get("error_kind") or "ok" for c in calls)
rss = [int(x) for x in open(f"{out}/rss_kib.txt") if x.strip()]
print(f"calls {len(calls)}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
print(f"node RSS: start {rss[0]/1024:.0f} MiB, max {max(rss)/1024:.0f} MiB, end {rss[-1]/1024:.0f} MiB ({len(rss)} samples)")
allowed = {"ok", "http_429:rate_limit_exceeded", "http_503:queue_timeout"}
bad = {k: v for k, v in kinds.items() if k not in allowed}
if bad:
    print("FAIL: answers other than 200, 429 and 503:", bad); sys.exit(1)
# The two devices' KV memory (64 MiB each) fills as pages are first touched; beyond that and
# 128 MiB of slack, memory would be growing with the requests.
bound = rss[0] + (2 * 64 + 128) * 1024
if max(rss) > bound:
    print(f"FAIL: resident memory grew past {bound/1024:.0f} MiB"); sys.exit(1)
print("RSS trend (MiB, one sample a second):", " ".join(f"{x/1024:.0f}" for x in rss[::3]))
print("ok: every request answered 200, 429 or 503; memory bounded; drained on SIGTERM")
PY

#!/usr/bin/env bash
# Takes deploy/grafana/dashboard.png, the README's picture of the dashboard, from a real run:
# starts triad-node (the embedded default, hosting file_read), a Prometheus scraping it every
# second with triad's rules loaded, drives three phases of load with triad-load (agent sessions
# with hosted tool calls, then longer chat prompts at higher concurrency, then agents again),
# renders the dashboard's queries over the run with deploy/grafana/preview.mjs and photographs
# the page with headless Chromium. Needs a built tree (build/bin), Debian's prometheus and
# chromium packages, and node. Not part of the test suite: the picture is committed.
#
#   bash deploy/screenshot.sh [OUT.png]    (about 4 minutes)
set -euo pipefail
out_png=$(realpath -m "${1:-$(dirname "$0")/grafana/dashboard.png}") # before the cd
cd "$(dirname "$0")/.."
source scripts/node-lib.sh
for tool in prometheus chromium node; do
  command -v "$tool" >/dev/null || { echo "screenshot: $tool not found (apt-get install prometheus chromium nodejs)" >&2; exit 1; }
done
for bin in triad-node triad-load; do
  [ -x "build/bin/$bin" ] || { echo "screenshot: build/bin/$bin missing: build first" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
# Stops what it started and waits for it (Prometheus writes its data directory as it goes).
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/tools"
printf 'build log: 3 tests failed in test_parse.py (line 42: expected 7, got 8)\n' > "$work/tools/build.log"

build/bin/triad-node --port 0 --allow-scripts --host-tools file_read --tools-root "$work/tools" \
  > "$work/node.log" 2>&1 &
node_pid=$!
pids+=("$node_pid")
wait_for_node "$node_pid" "$work/node.log"
echo "screenshot: triad-node on port $NODE_PORT"

prom_port=$(( 19090 + RANDOM % 1000 ))
cat > "$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/deploy/prometheus/triad-rules.yml
scrape_configs:
  - job_name: triad
    static_configs:
      - targets: ["127.0.0.1:$NODE_PORT"]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" > "$work/prometheus.log" 2>&1 &
prom_pid=$!
pids+=("$prom_pid")
prom="http://127.0.0.1:$prom_port"
ready() { node -e "fetch('$prom/-/ready').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"; }
for _ in $(seq 1 100); do ready && break; sleep 0.2; done
# Ours answers (not another Prometheus that had the port: ours then exited).
kill -0 "$prom_pid" 2>/dev/null && ready || { echo "screenshot: Prometheus did not start:" >&2; cat "$work/prometheus.log" >&2; exit 1; }
echo "screenshot: Prometheus on port $prom_port"

from=$(date +%s)
sleep 5 # a few idle scrapes first
load=(build/bin/triad-load --url "http://127.0.0.1:$NODE_PORT/v1" --requests 100000)
agent=(--workload agent --turns 2 --tool-calls uniform:1:3 --hosted-tool file_read
       --hosted-tool-args '{"path": "build.log"}' --output-tokens uniform:8:24
       --system-tokens 256 --user-tokens uniform:16:48)
echo "screenshot: phase 1: agent sessions with hosted file_read, 2 at a time, 60 s"
"${load[@]}" "${agent[@]}" --concurrency 2 --duration 60 > "$work/load1.txt"
echo "screenshot: phase 2: chat prompts of 200-600 tokens, 6 at a time, 60 s"
"${load[@]}" --workload chat --input-tokens uniform:200:600 --output-tokens uniform:16:64 \
  --concurrency 6 --duration 60 > "$work/load2.txt"
echo "screenshot: phase 3: agent sessions, 4 at a time, 40 s"
"${load[@]}" "${agent[@]}" --concurrency 4 --duration 40 > "$work/load3.txt"
sleep 5
to=$(date +%s)

node deploy/grafana/preview.mjs --dashboard deploy/grafana/triad-dashboard.json --prometheus "$prom" \
  --from "$from" --to "$to" --step 2 --rate-interval 15s --out "$work/preview.html" | tee "$work/preview.txt"
size=$(sed -n 's/.*(\([0-9]*\)x\([0-9]*\) px).*/\1,\2/p' "$work/preview.txt")
[ -n "$size" ] || { echo "screenshot: the preview did not say its size" >&2; exit 1; }
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size="$size" \
  --screenshot="$work/dashboard.png" "file://$work/preview.html" > "$work/chromium.log" 2>&1 ||
  { echo "screenshot: chromium failed:" >&2; cat "$work/chromium.log" >&2; exit 1; }
cp "$work/dashboard.png" "$out_png"
cp "$work/preview.html" "${out_png%.png}.html"
stop_node "$node_pid" "$work/node.log"
pids=("$prom_pid")
echo "screenshot: $out_png (and ${out_png%.png}.html) from $(date -u -d "@$from" +%H:%M:%S) to $(date -u -d "@$to" +%H:%M:%S) UTC"
for f in "$work"/load*.txt; do echo "== $(basename "$f")"; tail -n 6 "$f"; done

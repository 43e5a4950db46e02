#!/usr/bin/env bash
# Runs the official `openai` npm client against a real triad-node (and promtool on its
# /metrics), then drains it with SIGTERM and checks it exits 0 with nothing left behind.
# Usage: run.sh TRIAD_NODE_BINARY WORK_DIR MODEL_WRITER (the client is installed there once and reused; the
# node's config, log and tool directory are written to a fresh directory under it per run)
set -euo pipefail
node_bin=$1
work=$2
writer_bin=$3
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../../scripts/node-lib.sh"
openai_version=4.95.0

command -v node >/dev/null || { echo "conformance: node (Node.js) not found: run scripts/install-deps.sh --test" >&2; exit 1; }
command -v npm >/dev/null || { echo "conformance: npm not found: run scripts/install-deps.sh --test" >&2; exit 1; }
command -v promtool >/dev/null || { echo "conformance: promtool not found (Debian package prometheus): run scripts/install-deps.sh --test" >&2; exit 1; }

mkdir -p "$work"
if [ ! -f "$work/node_modules/openai/package.json" ] ||
   ! grep -q "\"version\": \"$openai_version\"" "$work/node_modules/openai/package.json"; then
  echo "conformance: installing openai@$openai_version from the npm registry into $work"
  (cd "$work" && npm init -y >/dev/null && npm install --no-audit --no-fund "openai@$openai_version" >/dev/null)
fi
cp "$here/openai_client.mjs" "$work/"
run=$(mktemp -d "$work/run.XXXXXX")

config=$run/node.toml
cat > "$config" <<TOML
[topology]
bind_threads = false
[tools]
hosted = ["shell"]
[server]
port = 0
api_key_env = "TRIAD_CONFORMANCE_KEY"
allow_scripts = true
[[devices]]
name = "prefill0"
backend = "cpu"
role = "prefill"
memory_mib = 256
[[devices]]
name = "decode0"
backend = "cpu"
role = "decode"
memory_mib = 256
TOML
log=$run/node.log
export TRIAD_CONFORMANCE_KEY=conformance-key
"$node_bin" --config "$config" --tools-root "$run/tools" > "$log" 2>&1 &
pid=$!
trap 'kill -KILL $pid 2>/dev/null || true' EXIT
wait_for_node $pid "$log"
port=$NODE_PORT
echo "conformance: triad-node on port $port"

status=0
(cd "$work" && node openai_client.mjs "http://127.0.0.1:$port/v1" "$TRIAD_CONFORMANCE_KEY") || status=1
if node -e 'fetch(process.argv[1]).then(async (r) => { if (!r.ok) process.exit(1); process.stdout.write(await r.text()); })' \
     "http://127.0.0.1:$port/metrics" > "$run/metrics.txt" && promtool check metrics < "$run/metrics.txt"; then
  echo "ok   /metrics passes promtool check metrics"
else
  echo "FAIL /metrics: promtool check metrics"; status=1
fi

if stop_node $pid "$log"; then echo "ok   SIGTERM: triad-node drained and exited 0"; else status=1; fi
trap - EXIT

# A model file: a GGUF the test writes, served with its own tokenizer and chat template.
model_file=$run/test-qwen2.gguf
message="Say hello there"
prompt_tokens=$("$writer_bin" "$model_file" "$message")
model_log=$run/node-model.log
"$node_bin" --model "$model_file" --port 0 --allow-scripts > "$model_log" 2>&1 &
pid=$!
trap 'kill -KILL $pid 2>/dev/null || true' EXIT
wait_for_node $pid "$model_log"
echo "conformance: triad-node --model on port $NODE_PORT ($(grep -m1 'model test-qwen2' "$model_log"))"
cp "$here/openai_client_model.mjs" "$work/"
(cd "$work" && node openai_client_model.mjs "http://127.0.0.1:$NODE_PORT/v1" unused test-qwen2 \
   "$message" "$prompt_tokens") || status=1
if stop_node $pid "$model_log"; then echo "ok   SIGTERM: triad-node --model drained and exited 0"; else status=1; fi
trap - EXIT
[ $status -eq 0 ] && rm -rf "$run"
exit $status

# Sourced by scripts that run triad-node in the background (main-job.sh, the conformance test).
# wait_for_node PID LOG: waits up to 60 s for "serving model ... on http://HOST:PORT" in LOG,
# sets NODE_PORT; fails (printing the log) when the node exits first or never serves.
wait_for_node() {
  local pid=$1 log=$2
  NODE_PORT=""
  for _ in $(seq 1 600); do
    NODE_PORT=$(sed -n 's|.*serving model .* on http://[^:]*:\([0-9]*\).*|\1|p' "$log")
    [ -n "$NODE_PORT" ] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "triad-node exited before serving:" >&2; cat "$log" >&2; return 1
    fi
    sleep 0.1
  done
  echo "triad-node did not start within 60 s:" >&2; cat "$log" >&2; return 1
}

# stop_node PID LOG: SIGTERM, then checks that it exited 0 and is gone.
stop_node() {
  local pid=$1 log=$2 rc=0
  kill -TERM "$pid"
  wait "$pid" || rc=$?
  if [ $rc -ne 0 ]; then echo "triad-node exited $rc after SIGTERM:" >&2; cat "$log" >&2; return 1; fi
  if kill -0 "$pid" 2>/dev/null; then echo "triad-node still running after SIGTERM" >&2; return 1; fi
  return 0
}

#!/usr/bin/env bash
# An unmodified perftest server killed mid-run over Braid's libibverbs.so.1:
# the client must end with a completion error and a non-zero exit, never
# hang. ib_read_bw is the hard case: the responder acknowledges a READ
# request before its response data, so only the READ's own timer notices
# the responder is gone.
#   tests/scripts/peer_killed_ibverbs.sh <build dir> [memif|virtio] [program]
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/ports.sh
build="$(realpath "${1:?build dir}")"
path="${2:-memif}"
program="${3:-ib_read_bw}"
lib="$build/ibverbs"
source scripts/lib/vnic-pair.sh
pair_run_dir braid-ibv-killed
vnic_pair "$path" "$run_dir"
source scripts/lib/braid-ibverbs.sh
use_braid_ibverbs "$lib"
export BRAID_IBV_LINK_WAIT_MS=60000
tcp_port=$(tcp_port)
args=(-D 30 -p "$tcp_port")
BRAID_IBV_PORT="$server_port" BRAID_IBV_IP=198.18.0.1 BRAID_IBV_LCORE=0 \
  taskset -c 0 "$program" "${args[@]}" >"$server_log" 2>&1 &
server_pid=$!
pair_server_ready peer_killed_ibverbs
client_log="$run_dir/client.log"
start_client() {
  BRAID_IBV_PORT="$client_port" BRAID_IBV_IP=198.18.0.2 BRAID_IBV_LCORE=1 \
    timeout 90 taskset -c 1 stdbuf -oL "$program" "${args[@]}" 127.0.0.1 >"$client_log" 2>&1 &
  client=$!
}
start_client
# The client prints its table header when the timed run starts. One that
# connected before the server listened is started again once it does.
restarts=0
for _ in $(seq 1 600); do
  grep -q "#bytes" "$client_log" && break
  if ! kill -0 "$client" 2>/dev/null && connect_refused "$client_log" && [[ $restarts -lt 2 ]]; then
    wait "$client" || true
    restarts=$((restarts + 1))
    echo "peer_killed_ibverbs: the client's connect was refused, the server was not listening yet"
    wait_listening "$tcp_port" "$server_pid" && start_client
  fi
  sleep 0.05
done
if ! grep -q "#bytes" "$client_log"; then
  cat "$server_log" "$client_log"
  echo "peer_killed_ibverbs: the run never started" >&2
  exit 1
fi
sleep 0.5  # mid-run: READs under way
kill -9 "$server_pid" 2>/dev/null || { echo "peer_killed_ibverbs: the server had already exited:" >&2; cat "$server_log" >&2; }
server_pid=
start=$(date +%s)
set +e
wait "$client"
rc=$?
set -e
elapsed=$(($(date +%s) - start))
cat "$client_log"
if [[ $rc -eq 0 ]]; then
  echo "peer_killed_ibverbs: the client exited 0 although its peer died" >&2
  exit 1
fi
if [[ $rc -eq 124 ]]; then
  echo "peer_killed_ibverbs: the client hung (killed by timeout after 90 s)" >&2
  exit 1
fi
if ! grep -qi "completion with error\|error" "$client_log"; then
  echo "peer_killed_ibverbs: no completion error reported (client exit $rc)" >&2
  exit 1
fi
echo "peer_killed_ibverbs: $program client failed cleanly after ${elapsed}s (exit $rc)"

#!/usr/bin/env bash
# A peer process killed mid-transfer: the survivor must end the run with
# RETRY_EXC_ERR (printed as "transport retry counter exceeded") within the
# retry budget, exit non-zero, and not hang.
#   tests/scripts/peer_killed.sh <build dir> [virtio|memif]
set -euo pipefail
source "$(dirname "$0")/../../scripts/lib/ports.sh"
build="${1:?build dir}"
path="${2:-memif}"
bin="$build/apps/perftest/braid_write_bw"
dir=$(mktemp -d /tmp/braid-killed.XXXXXX)
trap 'kill $server $client 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(tcp_port)
if [[ "$path" == memif ]]; then
  sp="net_memif0,role=server,id=0,socket=$dir/m.sock,socket-abstract=no"
  cp="net_memif0,role=client,id=0,socket=$dir/m.sock,socket-abstract=no"
else
  sp="net_vhost0,iface=$dir/v.sock,queues=1"
  cp="net_virtio_user0,path=$dir/v.sock,queues=1"
fi
# -u 10: the QP timeout caps each RTO at 4.096 us * 2^10 = 4.2 ms.
args=(-D 30 -u 10 -p "$port" --timeout 60)
"$bin" "${args[@]}" --lcore 0 --dev-port "$sp" --ip 198.18.0.1 >"$dir/server.log" 2>&1 &
server=$!
for _ in $(seq 1 400); do [[ -S "$dir/m.sock" || -S "$dir/v.sock" ]] && break; sleep 0.05; done
"$bin" "${args[@]}" --lcore 1 --dev-port "$cp" --ip 198.18.0.2 127.0.0.1 >"$dir/client.log" 2>&1 &
client=$!
# Kill the server once the client is in its timed run (it prints the table
# header when it starts sending).
for _ in $(seq 1 400); do grep -q "#bytes" "$dir/client.log" && break; sleep 0.05; done
grep -q "#bytes" "$dir/client.log" || { cat "$dir/server.log" "$dir/client.log"; exit 1; }
kill -9 "$server"
start=$(date +%s)
set +e
wait "$client"
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
cat "$dir/client.log"
if [[ $rc -eq 0 ]]; then
  echo "peer_killed: the client exited 0 although its peer died" >&2
  exit 1
fi
if ! grep -q "retry counter exceeded" "$dir/client.log"; then
  echo "peer_killed: no RETRY_EXC_ERR reported (client exit $rc)" >&2
  exit 1
fi
echo "peer_killed: survivor failed cleanly with RETRY_EXC_ERR after ${elapsed}s (exit $rc)"

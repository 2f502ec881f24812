#!/usr/bin/env bash
# Debian's unmodified ibv_asyncwatch (ibverbs-utils) over Braid's
# libibverbs.so.1 on the server side of a memif pair hears its port come up
# when a peer attaches and go down when the peer leaves: PORT_ACTIVE then
# PORT_ERR on port 1, for each of two peers in turn (each peer is another
# ibv_asyncwatch, on the client side: it stays attached until it is
# killed). The program only waits in ibv_get_async_event: the device's
# progress thread drives the port.
#   tests/scripts/ibverbs_asyncwatch.sh <build dir>
set -euo pipefail
build="$(realpath "${1:?build dir}")"
source "$(dirname "$0")/../../scripts/lib/braid-ibverbs.sh"
use_braid_ibverbs "$build/ibverbs"
for t in ibv_asyncwatch ibv_devinfo; do
  command -v "$t" >/dev/null || { echo "$t missing (apt-get install ibverbs-utils)" >&2; exit 1; }
done
dir=$(mktemp -d /tmp/braid-asyncwatch.XXXXXX)
watch_pid=
peer_pid=
stop() {
  if [[ -n "$1" ]]; then kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; fi
}
cleanup() {
  stop "$peer_pid"
  stop "$watch_pid"
  rm -rf "$dir"
}
trap cleanup EXIT
sock="$dir/memif.sock"
log="$dir/watch.log"
fail() { echo "ibverbs_asyncwatch: $1; ibv_asyncwatch printed:" >&2; cat "$log" >&2; exit 1; }
# until_log <count> <pattern>: until the log has that many matching lines
# (bounded: a lost event fails instead of hanging).
until_log() {
  for _ in $(seq 1 600); do
    [[ $(grep -Ec "$2" "$log" || true) -ge $1 ]] && return 0
    kill -0 "$watch_pid" 2>/dev/null || fail "it exited"
    sleep 0.05
  done
  fail "no $1 line(s) matching '$2'"
}

BRAID_IBV_PORT="net_memif0,role=server,id=0,socket=$sock,socket-abstract=no" \
  BRAID_IBV_IP=198.18.0.1 BRAID_IBV_LCORE=0 BRAID_IBV_LINK_WAIT_MS=0 \
  stdbuf -oL timeout 120 taskset -c 0 ibv_asyncwatch >"$log" 2>&1 &
watch_pid=$!
until_log 1 'async event FD'
for round in 1 2; do
  BRAID_IBV_PORT="net_memif0,role=client,id=0,socket=$sock,socket-abstract=no" \
    BRAID_IBV_IP=198.18.0.2 BRAID_IBV_LCORE=1 BRAID_IBV_LINK_WAIT_MS=10000 \
    timeout 120 taskset -c 1 ibv_asyncwatch >"$dir/peer.log" 2>&1 &
  peer_pid=$!
  until_log "$round" 'IBV_EVENT_PORT_ACTIVE \(9\), port 1'
  kill -0 "$peer_pid" 2>/dev/null || { cat "$dir/peer.log" >&2; fail "the peer exited"; }
  stop "$peer_pid"
  peer_pid=
  until_log "$round" 'IBV_EVENT_PORT_ERR \(10\), port 1'
done
events=$(grep -E 'event_type' "$log" | sed -E 's/.*(PORT_[A-Z]+).*/\1/' | tr '\n' ' ')
[[ "$events" == "PORT_ACTIVE PORT_ERR PORT_ACTIVE PORT_ERR " ]] || fail "events in the wrong order: $events"
echo "ibverbs_asyncwatch: $events"

#!/usr/bin/env bash
# Runs an unmodified rdma_cm program (rdmacm-utils' rping, ucmatose,
# rdma_server/rdma_client; qperf -cm1; perftest -R) as a server and a
# client on this host over Braid's librdmacm.so.1 and libibverbs.so.1,
# joined by a DPDK virtual NIC pair, one core each. The connection is made
# by Braid's CM over the vNIC (UD datagrams to QP 1), not over a kernel
# socket: the server's RDMA address is 198.18.0.1, the client's 198.18.0.2.
#   scripts/rdmacm-loopback.sh [--path memif|virtio|switch] [--netns] [--wait-tcp] [--expect REGEX]
#                              [--once] [--daemon]
#                              -- <server command...> -- <client command...>
# e.g. scripts/rdmacm-loopback.sh -- rping -s -a @SERVER@ -- rping -c -a @SERVER@ -C 100 -v
# @SERVER@ and @CLIENT@ in either command become those addresses, @PORT@ a
# free TCP port (for tools that also talk over TCP: qperf, perftest).
# --netns runs both in a namespace whose kernel holds the two addresses
# (scripts/lib/cm-netns.sh), for qperf, whose control connection is a
# kernel TCP connection to the server's RDMA address. --wait-tcp starts the
# client once the server listens on TCP @PORT@ (qperf's server opens its
# device only when a client has connected there), not once its vNIC is up.
# --expect REGEX: the client's output must match it (extended regex), else
# the run fails. --once: the client is not started again (it retries itself).
# --daemon: the server serves until stopped (qperf): stopped once the client
# is done, its exit status not counted.
# --path switch joins them through braid_switch (two memif ports) instead:
# each side's link is up as soon as it attaches, whatever the other does
# (libfabric's fi_pingpong opens its server's device before its client has
# opened one, and a vNIC pair's link waits for both).
# A client whose request met no listener yet (REJECTED, "error 8", as a
# server opens its device first and listens after) is started again, as
# perftest does itself. Library from $BRAID_BUILD_DIR (default build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ports.sh
source scripts/lib/vnic-pair.sh
source scripts/lib/braid-ibverbs.sh
source scripts/lib/cm-netns.sh
source scripts/lib/soft-switch.sh
path=memif
netns=0
uses_tcp=0
expect=
attempts=5
daemon=0
cm_exec=()
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    --path) path="$2"; shift 2 ;;
    --netns) netns=1; shift ;;
    --wait-tcp) uses_tcp=1; shift ;;
    --expect) expect="$2"; shift 2 ;;
    --once) attempts=1; shift ;;
    --daemon) daemon=1; shift ;;
    *) echo "rdmacm-loopback: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ "${1:-}" == "--" ]] || { echo "usage: $0 [--path memif|virtio] -- <server...> -- <client...>" >&2; exit 2; }
shift
server=()
while [[ $# -gt 0 && "$1" != "--" ]]; do server+=("$1"); shift; done
[[ "${1:-}" == "--" ]] || { echo "rdmacm-loopback: no client command" >&2; exit 2; }
shift
client=("$@")
((${#server[@]} && ${#client[@]})) || { echo "rdmacm-loopback: empty command" >&2; exit 2; }
tcp=$(tcp_port)
subst() {
  local a
  for a in "$@"; do
    a="${a//@SERVER@/198.18.0.1}"
    a="${a//@CLIENT@/198.18.0.2}"
    printf '%s\n' "${a//@PORT@/$tcp}"
  done
}
mapfile -t server < <(subst "${server[@]}")
mapfile -t client < <(subst "${client[@]}")
for p in "${server[0]}" "${client[0]}"; do
  command -v "$p" >/dev/null || {
    echo "rdmacm-loopback: $p not found (apt-get install rdmacm-utils qperf perftest)" >&2
    exit 1
  }
done
build_dir="$(realpath "${BRAID_BUILD_DIR:-build/release}")"
lib="$build_dir/ibverbs"
[[ -e "$lib/librdmacm.so.1" ]] || { echo "rdmacm-loopback: $lib/librdmacm.so.1 not built" >&2; exit 1; }
use_braid_ibverbs "$lib" || exit 1
pair_run_dir braid-rdmacm
cleanup() {
  [[ -n "${server_pid:-}" ]] && kill -KILL "$server_pid" 2>/dev/null
  switch_down
  cm_netns_down
  rm -rf "$run_dir"
}
trap cleanup EXIT
if ((netns)); then
  cm_netns_up || exit 1
fi
if [[ "$path" == switch ]]; then
  switch_up "$build_dir" "$run_dir" 2 || exit 1
  server_port="${switch_ports[0]}"
  client_port="${switch_ports[1]}"
  sock="$run_dir/p0.sock"
  export BRAID_IBV_IDLE_YIELD=16
else
  vnic_pair "$path" "$run_dir" 1500 1 || {
    echo "rdmacm-loopback: unknown path '$path' (memif, virtio or switch)" >&2
    exit 2
  }
fi
export BRAID_IBV_LINK_WAIT_MS=60000
BRAID_IBV_PORT="$server_port" BRAID_IBV_IP=198.18.0.1 BRAID_IBV_LCORE=0 \
  ${cm_exec[@]+"${cm_exec[@]}"} timeout -k 5 120 taskset -c 0 "${server[@]}" >"$server_log" 2>&1 &
server_pid=$!
# A server with a TCP port (qperf) opens its device only once a client
# has connected there: wait for it to listen; else for its vNIC socket.
if ((uses_tcp)); then
  until ${cm_exec[@]+"${cm_exec[@]}"} ss -ltnH "sport = :$tcp" | grep -q .; do
    kill -0 "$server_pid" 2>/dev/null || { cat "$server_log" >&2; exit 1; }
    sleep 0.05
  done
else
  pair_server_ready rdmacm-loopback
fi
client_log="$run_dir/client.log"
set +e
for ((attempt = 1; attempt <= attempts; ++attempt)); do
  BRAID_IBV_PORT="$client_port" BRAID_IBV_IP=198.18.0.2 BRAID_IBV_LCORE=1 \
    ${cm_exec[@]+"${cm_exec[@]}"} timeout -k 5 120 taskset -c 1 "${client[@]}" >"$client_log" 2>&1
  client_rc=$?
  [[ $client_rc -ne 0 ]] && kill -0 "$server_pid" 2>/dev/null &&
    ((attempt < attempts)) &&
    grep -qE "REJECTED|rejected|error 8|Connection refused|ECONNREFUSED" "$client_log" || break
  echo "rdmacm-loopback: the server was not listening yet (attempt $attempt); the client again"
done
set -e
echo "---- client (198.18.0.2) ----"
cat "$client_log"
if ((daemon)); then
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
  echo "---- server (198.18.0.1), stopped ----"
  cat "$server_log"
  [[ $client_rc -eq 0 ]] || { echo "rdmacm-loopback: client exited $client_rc" >&2; exit 1; }
else
  pair_finish rdmacm-loopback "$client_rc"
fi
if [[ -n "$expect" ]] && ! grep -qE -- "$expect" "$client_log"; then
  echo "rdmacm-loopback: the client's output does not match '$expect'" >&2
  exit 1
fi

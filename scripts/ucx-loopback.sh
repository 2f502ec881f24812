#!/usr/bin/env bash
# Debian's unmodified ucx_perftest between two processes on this host, each
# with its own Braid device over a vNIC pair (memif or virtio), through
# Braid's libibverbs.so.1: UCX's rc_verbs and ud_verbs transports.
#   scripts/ucx-loopback.sh [--path memif|virtio] [--tls TLS] [--mtu 1500|9000] <ucx_perftest args...>
#   e.g. scripts/ucx-loopback.sh --tls rc_verbs,ud_verbs -t tag_lat -n 10000
# --tls tcp runs the same test over UCX's TCP on loopback (no Braid), the
# baseline. The device node UCX looks for is made for the run
# (scripts/lib/ucx-device.sh) and removed after, if this run made it.
# BRAID_BUILD_DIR picks the build (default build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ports.sh
source scripts/lib/vnic-pair.sh
source scripts/lib/braid-ibverbs.sh
source scripts/lib/ucx-device.sh
path=memif
tls=rc_verbs,ud_verbs
mtu=1500
while [[ $# -gt 0 ]]; do
  case "$1" in
    --path) path="$2"; shift 2 ;;
    --tls) tls="$2"; shift 2 ;;
    --mtu) mtu="$2"; shift 2 ;;
    *) break ;;
  esac
done
command -v ucx_perftest >/dev/null || {
  echo "ucx-loopback: ucx_perftest not found (apt-get install ucx-utils)" >&2
  exit 1
}
build_dir="$(realpath "${BRAID_BUILD_DIR:-build/release}")"
export UCX_TLS="$tls"
pair_run_dir braid-ucx
if [[ "$tls" == tcp ]]; then
  export UCX_NET_DEVICES=lo
  server_env=()
  client_env=()
else
  use_braid_ibverbs "$build_dir/ibverbs" || exit 1
  ucx_device_node_up braid0 || exit 1
  trap '[[ -n "${server_pid:-}" ]] && kill "$server_pid" 2>/dev/null; ucx_device_node_down; rm -rf "$run_dir"' EXIT
  vnic_pair "$path" "$run_dir" "$mtu" 1 || {
    echo "ucx-loopback: unknown path '$path' (memif or virtio)" >&2
    exit 2
  }
  export UCX_NET_DEVICES=braid0:1 BRAID_IBV_LINK_WAIT_MS=60000 BRAID_IBV_MTU="$mtu"
  server_env=(BRAID_IBV_PORT="$server_port" BRAID_IBV_IP=198.18.0.1)
  client_env=(BRAID_IBV_PORT="$client_port" BRAID_IBV_IP=198.18.0.2)
fi
port=$(tcp_port)
env "${server_env[@]}" timeout 120 taskset -c 0 ucx_perftest -p "$port" "$@" >"$server_log" 2>&1 &
server_pid=$!
# ucx_perftest's server opens its device only once the client has
# connected to its TCP port (the memif client then retries its link).
wait_listening "$port" "$server_pid" || true
client_log="$run_dir/client.log"
set +e
env "${client_env[@]}" timeout 120 taskset -c 1 ucx_perftest -p "$port" "$@" 127.0.0.1 \
  >"$client_log" 2>&1
client_rc=$?
set -e
echo "---- client (UCX_TLS=$tls) ----"
grep -v "memif_connect_client" "$client_log" || true
pair_finish ucx-loopback "$client_rc"
grep -q "^Final:" "$client_log" || {
  echo "ucx-loopback: no Final row in the client's report" >&2
  exit 1
}

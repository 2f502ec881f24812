#!/usr/bin/env bash
# Runs a Braid perftest-style tool as two processes on one host, joined by a
# virtual NIC pair, one core each: the server on core 0, the client on core 1.
#   scripts/loopback.sh [--path virtio|memif] <tool> [tool arguments...]
# e.g. scripts/loopback.sh braid_write_bw -s 65536 -n 5000
#      scripts/loopback.sh --path memif braid_write_lat
# virtio: vhost-user (server side) <-> virtio-user (client side).
# memif:  memif server <-> memif client.
# No hugepages are needed. Tools come from $BRAID_BUILD_DIR (default
# build/release)/apps/perftest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ports.sh
path=virtio
if [[ "${1:-}" == "--path" ]]; then
  path="$2"
  shift 2
fi
tool="${1:?usage: $0 [--path virtio|memif] <tool> [args...]}"
shift
build_dir="${BRAID_BUILD_DIR:-build/release}"
bin="$build_dir/apps/perftest/$tool"
source scripts/lib/build.sh
braid_need loopback "$bin"

# The link MTU and the engines the tool is asked for (--link-mtu N or
# --link-mtu=N; --engines likewise): the virtual NICs are made to match.
link_mtu=1500
engines=1
prev=
for a in "$@"; do
  [[ "$prev" == --link-mtu ]] && link_mtu="$a"
  [[ "$a" == --link-mtu=* ]] && link_mtu="${a#--link-mtu=}"
  [[ "$prev" == --engines ]] && engines="$a"
  [[ "$a" == --engines=* ]] && engines="${a#--engines=}"
  prev="$a"
done

tcp_port=$(tcp_port)
source scripts/lib/vnic-pair.sh
pair_run_dir braid-loopback
vnic_pair "$path" "$run_dir" "$link_mtu" "$engines" || {
  echo "loopback: unknown path '$path' (virtio or memif)" >&2
  exit 2
}

common=(--timeout 60 -p "$tcp_port")
"$bin" "${common[@]}" --lcore 0 --dev-port "$server_port" --ip 198.18.0.1 "$@" >"$server_log" 2>&1 &
server_pid=$!
# The server creates the socket the client attaches to.
pair_server_ready loopback
set +e
echo "---- client (198.18.0.2) ----"
"$bin" "${common[@]}" --lcore 1 --dev-port "$client_port" --ip 198.18.0.2 "$@" 127.0.0.1
client_rc=$?
set -e
pair_finish loopback "$client_rc"

#!/usr/bin/env bash
# Runs a Braid perftest-style tool between two network namespaces joined by
# a veth pair, through a kernel-facing PMD (AF_PACKET or AF_XDP): the path a
# real NIC's kernel interface would take, and a check that nothing in Braid
# depends on the shared-memory vdevs of scripts/loopback.sh.
#   scripts/netns-loopback.sh [--pmd af_packet|af_xdp] [--mtu N] <tool> [tool arguments...]
# e.g. scripts/netns-loopback.sh braid_write_bw -s 65536 --verify
#      scripts/netns-loopback.sh --pmd af_packet --mtu 9000 braid_write_bw -s 65536
# Needs root (namespaces, veth). Creates two namespaces joined by two veth
# pairs -- one for Braid's frames (no kernel address: AF_XDP takes every
# frame of its queue), one for the tools' TCP exchange (198.19.0.1/.2) --
# and removes them on exit. Braid's addresses: 198.18.0.1/.2.
# The server runs on core 0, the client on core 1.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ports.sh
pmd=af_packet
mtu=1500
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pmd) pmd="$2"; shift 2 ;;
    --mtu) mtu="$2"; shift 2 ;;
    *) break ;;
  esac
done
tool="${1:?usage: $0 [--pmd af_packet|af_xdp] [--mtu N] <tool> [args...]}"
shift
build_dir="${BRAID_BUILD_DIR:-build/release}"
bin="$(realpath "$build_dir/apps/perftest/$tool" 2>/dev/null || true)"
[[ -x "$bin" ]] || { echo "netns-loopback: $build_dir/apps/perftest/$tool not built" >&2; exit 1; }
if [[ $(id -u) -ne 0 ]]; then
  echo "netns-loopback: needs root (network namespaces and veth)" >&2
  exit 77
fi

tag="brd$$"
ns_a="$tag-a"
ns_b="$tag-b"
dev_a="${tag}a"
dev_b="${tag}b"
ctl_a="${tag}ca"
ctl_b="${tag}cb"
run_dir=$(mktemp -d /tmp/braid-netns.XXXXXX)
source scripts/lib/netns.sh
cleanup() {
  [[ -n "${server_pid:-}" ]] && kill "$server_pid" 2>/dev/null || true
  netns_cleanup
  rm -rf "$run_dir"
}
trap cleanup EXIT

netns_make netns-loopback "$ns_a" "$ns_b"
netns_link "$ns_a" "$dev_a" "$ns_b" "$dev_b" "$mtu"  # the datapath
netns_link "$ns_a" "$ctl_a" "$ns_b" "$ctl_b"          # the tools' TCP exchange
ip -n "$ns_a" addr add 198.19.0.1/24 dev "$ctl_a"
ip -n "$ns_b" addr add 198.19.0.2/24 dev "$ctl_b"

port_spec() { # port_spec <interface>
  case "$pmd" in
    af_packet)
      local spec="net_af_packet0,iface=$1,qdisc_bypass=1,framecnt=4096"
      # Ring frames hold a whole frame plus the packet header; blocks are
      # page multiples holding whole frames.
      if [[ "$mtu" -gt 1500 ]]; then spec+=",framesz=10240,blocksz=20480"; fi
      echo "$spec"
      ;;
    af_xdp) echo "net_af_xdp0,iface=$1,start_queue=0,queue_count=1,busy_budget=0" ;;
    *)
      echo "netns-loopback: unknown PMD '$pmd' (af_packet or af_xdp)" >&2
      exit 2
      ;;
  esac
}

tcp_port=$(tcp_port)
common=(--timeout 60 -p "$tcp_port" --link-mtu "$mtu")
server_log="$run_dir/server.log"
ip netns exec "$ns_a" "$bin" "${common[@]}" --lcore 0 --dev-port "$(port_spec "$dev_a")" \
  --ip 198.18.0.1 "$@" >"$server_log" 2>&1 &
server_pid=$!
# The server listens once its device is open.
for _ in $(seq 1 400); do
  grep -q "Waiting for client" "$server_log" && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
set +e
ip netns exec "$ns_b" "$bin" "${common[@]}" --lcore 1 --dev-port "$(port_spec "$dev_b")" \
  --ip 198.18.0.2 "$@" 198.19.0.1
client_rc=$?
wait "$server_pid"
server_rc=$?
server_pid=
set -e
echo
echo "---- server (198.18.0.1, namespace $ns_a) ----"
cat "$server_log"
if [[ $client_rc -ne 0 || $server_rc -ne 0 ]]; then
  echo "netns-loopback: client exited $client_rc, server $server_rc" >&2
  exit 1
fi

#!/usr/bin/env bash
# A routed path with two equal-cost links: host A -- router R1 == two links ==
# router R2 -- host B, Linux routers hashing flows on the 5-tuple (so each of
# Braid's entropies takes one link), Braid on AF_PACKET at both hosts. One
# link can be impaired the way the kernel here can: a token bucket on R2's
# egress to R1 over the second link that drops what exceeds its rate (the
# client B's data towards the server A).
#   scripts/netns-ecmp.sh [--slow-link RATE] <tool> [tool arguments...]
# e.g. scripts/netns-ecmp.sh --slow-link 100mbit braid_write_bw -s 65536 -D 5 --stats
# Needs root. Namespaces and links are removed on exit. Addresses: hosts
# 198.18.1.2 (A, server) and 198.18.2.2 (B, client), the tools' TCP exchange
# on a direct veth (198.19.0.1/.2). Server on core 0, client on core 1.
set -euo pipefail
cd "$(dirname "$0")/.."
slow=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --slow-link) slow="$2"; shift 2 ;;
    *) break ;;
  esac
done
tool="${1:?usage: $0 [--slow-link RATE] <tool> [args...]}"
shift
build_dir="${BRAID_BUILD_DIR:-build/release}"
bin="$(realpath "$build_dir/apps/perftest/$tool" 2>/dev/null || true)"
[[ -x "$bin" ]] || { echo "netns-ecmp: $build_dir/apps/perftest/$tool not built" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "netns-ecmp: needs root" >&2; exit 77; }

t="be$$"
A="$t-a" B="$t-b" R1="$t-r1" R2="$t-r2"
run_dir=$(mktemp -d /tmp/braid-ecmp.XXXXXX)
cleanup() {
  [[ -n "${server_pid:-}" ]] && kill "$server_pid" 2>/dev/null || true
  for ns in "$A" "$B" "$R1" "$R2"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$run_dir"
}
trap cleanup EXIT
for ns in "$A" "$B" "$R1" "$R2"; do
  ip netns add "$ns" || { echo "netns-ecmp: cannot create namespaces" >&2; exit 77; }
  ip -n "$ns" link set lo up
done
# link <ns1> <if1> <ns2> <if2>
link() {
  ip link add "$2" numtxqueues 1 numrxqueues 1 type veth peer name "$4" numtxqueues 1 numrxqueues 1
  ip link set "$2" netns "$1"
  ip link set "$4" netns "$3"
  ip -n "$1" link set "$2" up
  ip -n "$3" link set "$4" up
}
link "$A" "${t}a" "$R1" "${t}r1a"
link "$R1" "${t}l1" "$R2" "${t}m1"
link "$R1" "${t}l2" "$R2" "${t}m2"
link "$R2" "${t}r2b" "$B" "${t}b"
link "$A" "${t}ca" "$B" "${t}cb"
ip -n "$A" addr add 198.19.0.1/24 dev "${t}ca"
ip -n "$B" addr add 198.19.0.2/24 dev "${t}cb"
ip -n "$R1" addr add 198.18.1.1/24 dev "${t}r1a"
ip -n "$R1" addr add 198.18.10.1/30 dev "${t}l1"
ip -n "$R1" addr add 198.18.11.1/30 dev "${t}l2"
ip -n "$R2" addr add 198.18.10.2/30 dev "${t}m1"
ip -n "$R2" addr add 198.18.11.2/30 dev "${t}m2"
ip -n "$R2" addr add 198.18.2.1/24 dev "${t}r2b"
for r in "$R1" "$R2"; do
  ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1
  ip netns exec "$r" sysctl -qw net.ipv4.fib_multipath_hash_policy=1  # L4 hash
  ip netns exec "$r" sysctl -qw net.ipv4.conf.all.rp_filter=0
done
ip -n "$R1" route add 198.18.2.0/24 nexthop via 198.18.10.2 nexthop via 198.18.11.2
ip -n "$R2" route add 198.18.1.0/24 nexthop via 198.18.10.1 nexthop via 198.18.11.1
if [[ -n "$slow" ]]; then
  ip netns exec "$R2" tc qdisc add dev "${t}m2" root tbf rate "$slow" burst 32kb latency 1ms
fi

spec() { echo "net_af_packet0,iface=$1,qdisc_bypass=1,framecnt=4096"; }
tcp_port=$((20000 + RANDOM % 20000))
common=(--timeout 60 -p "$tcp_port" --prefix-len 24)
server_log="$run_dir/server.log"
ip netns exec "$A" "$bin" "${common[@]}" --lcore 0 --dev-port "$(spec "${t}a")" \
  --ip 198.18.1.2 --gateway 198.18.1.1 "$@" >"$server_log" 2>&1 &
server_pid=$!
for _ in $(seq 1 400); do
  grep -q "Waiting for client" "$server_log" && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
set +e
echo "---- client (198.18.2.2) ----"
ip netns exec "$B" "$bin" "${common[@]}" --lcore 1 --dev-port "$(spec "${t}b")" \
  --ip 198.18.2.2 --gateway 198.18.2.1 "$@" 198.19.0.1
client_rc=$?
wait "$server_pid"
server_rc=$?
server_pid=
set -e
echo
echo "---- server (198.18.1.2) ----"
cat "$server_log"
for l in m1 m2; do
  echo "R2 ${t}$l (towards A): $(ip netns exec "$R2" cat /sys/class/net/${t}$l/statistics/tx_packets) packets sent"
done
if [[ -n "$slow" ]]; then ip netns exec "$R2" tc -s qdisc show dev "${t}m2" | grep -E "dropped" | head -1; fi
if [[ $client_rc -ne 0 || $server_rc -ne 0 ]]; then
  echo "netns-ecmp: client exited $client_rc, server $server_rc" >&2
  exit 1
fi

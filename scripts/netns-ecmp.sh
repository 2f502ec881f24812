#!/usr/bin/env bash
# A routed fabric with N equal-cost links: host A -- router R1 == N links ==
# router R2 -- host B. The routers are Linux, hashing flows on the 5-tuple
# (net.ipv4.fib_multipath_hash_policy=1), so each of Braid's entropies takes
# one link. Braid runs on AF_PACKET at both hosts, routed through them
# (--gateway); the tools' TCP exchange has a direct veth of its own.
#
#   scripts/netns-ecmp.sh [--links N] [--impair KIND] [--impair-after PACKETS]
#                         [--expect-even PCT] [--expect-off] <tool> [tool arguments...]
#
# The client (B) sends the data, so impairments act on R2's egress towards A
# over link 2 (the data direction), with what this kernel has:
#   slow:RATE  a token bucket (tbf) that drops what exceeds RATE, e.g. slow:100mbit
#   silent     the link keeps its route and carrier but every frame R2 gives
#              it goes nowhere (a pfifo queue of length 0): no signal at all
#   down       both ends of the link go down (the routers drop its route)
# --impair-after P applies it once P packets have crossed the links (mid-run;
# 0, the default, applies it before the run).
# Checks, after the tool (both ends) exits 0:
#   --expect-even PCT  every link carried within PCT% of an even share
#   --expect-off       after the impairment, link 2 was given less than a
#                      tenth of what the others carried (an oblivious
#                      spray would keep giving it its share): Braid moved
#                      its traffic off it
# e.g. scripts/netns-ecmp.sh --links 2 --impair silent --impair-after 20000 \
#        braid_write_bw -s 65536 -D 6 --verify --stats
# Needs root (exit 77 without). Namespaces are removed on exit. Addresses:
# hosts 198.18.1.2 (A, server) and 198.18.2.2 (B, client); TCP on
# 198.19.0.1/.2. Server on core 0, client on core 1.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ports.sh
links=2 impair= impair_after=0 expect_even= expect_off=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --links) links="$2"; shift 2 ;;
    --slow-link) impair="slow:$2"; shift 2 ;;
    --impair) impair="$2"; shift 2 ;;
    --impair-after) impair_after="$2"; shift 2 ;;
    --expect-even) expect_even="$2"; shift 2 ;;
    --expect-off) expect_off=1; shift ;;
    *) break ;;
  esac
done
tool="${1:?usage: $0 [--links N] [--impair slow:RATE|silent|down] [--impair-after P] <tool> [args...]}"
shift
[[ "$links" =~ ^[0-9]+$ && $links -ge 2 && $links -le 8 ]] || { echo "netns-ecmp: --links must be 2..8" >&2; exit 2; }
case "$impair" in ""|silent|down|slow:*) ;; *) echo "netns-ecmp: unknown impairment '$impair'" >&2; exit 2 ;; esac
build_dir="${BRAID_BUILD_DIR:-build/release}"
bin="$(realpath "$build_dir/apps/perftest/$tool" 2>/dev/null || true)"
[[ -x "$bin" ]] || { echo "netns-ecmp: $build_dir/apps/perftest/$tool not built" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "netns-ecmp: needs root" >&2; exit 77; }

t="be$$"
A="$t-a" B="$t-b" R1="$t-r1" R2="$t-r2"
run_dir=$(mktemp -d /tmp/braid-ecmp.XXXXXX)
source scripts/lib/netns.sh
cleanup() {
  [[ -n "${server_pid:-}" ]] && kill "$server_pid" 2>/dev/null || true
  [[ -n "${impair_pid:-}" ]] && kill "$impair_pid" 2>/dev/null || true
  netns_cleanup
  rm -rf "$run_dir"
}
trap cleanup EXIT
netns_make netns-ecmp "$A" "$B" "$R1" "$R2"
netns_link "$A" "${t}a" "$R1" "${t}r1a"
netns_link "$R2" "${t}r2b" "$B" "${t}b"
netns_link "$A" "${t}ca" "$B" "${t}cb"
hops1=() hops2=()
for i in $(seq 1 "$links"); do
  netns_link "$R1" "${t}l$i" "$R2" "${t}m$i"
  ip -n "$R1" addr add "198.18.$((9 + i)).1/30" dev "${t}l$i"
  ip -n "$R2" addr add "198.18.$((9 + i)).2/30" dev "${t}m$i"
  hops1+=(nexthop via "198.18.$((9 + i)).2")
  hops2+=(nexthop via "198.18.$((9 + i)).1")
done
ip -n "$A" addr add 198.19.0.1/24 dev "${t}ca"
ip -n "$B" addr add 198.19.0.2/24 dev "${t}cb"
ip -n "$R1" addr add 198.18.1.1/24 dev "${t}r1a"
ip -n "$R2" addr add 198.18.2.1/24 dev "${t}r2b"
for r in "$R1" "$R2"; do
  ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1
  ip netns exec "$r" sysctl -qw net.ipv4.fib_multipath_hash_policy=1  # L4 hash
  # A fixed hash seed, where the kernel has one (6.11+): the same flows take
  # the same links on every run and every machine.
  ip netns exec "$r" sysctl -qw net.ipv4.fib_multipath_hash_seed="${BRAID_ECMP_SEED:-1}" 2>/dev/null || true
  ip netns exec "$r" sysctl -qw net.ipv4.conf.all.rp_filter=0
done
ip -n "$R1" route add 198.18.2.0/24 "${hops1[@]}"
ip -n "$R2" route add 198.18.1.0/24 "${hops2[@]}"

# Packets R2 has sent towards A over link i.
# Packets R2 has given link i towards A: sent, plus what its qdisc dropped
# (an impairment's qdisc starts counting when it is put on).
link_tx() {
  local sent dropped
  sent=$(ip netns exec "$R2" cat "/sys/class/net/${t}m$1/statistics/tx_packets")
  dropped=$(ip netns exec "$R2" tc -s qdisc show dev "${t}m$1" | sed -n 's/.*(dropped \([0-9]*\).*/\1/p' | head -1)
  echo $((sent + ${dropped:-0}))
}
links_tx() { local s=0; for i in $(seq 1 "$links"); do s=$((s + $(link_tx "$i"))); done; echo "$s"; }
apply_impair() {
  case "$impair" in
    slow:*) ip netns exec "$R2" tc qdisc replace dev "${t}m2" root tbf rate "${impair#slow:}" burst 32kb latency 1ms ;;
    # A FIFO of length 0 drops every frame and is never bypassed; the
    # route and the carrier stay, so the router keeps hashing flows onto it.
    silent) ip netns exec "$R2" tc qdisc replace dev "${t}m2" root pfifo limit 0 ;;
    down) ip -n "$R2" link set "${t}m2" down; ip -n "$R1" link set "${t}l2" down ;;
  esac
}
impair_marks="$run_dir/impair"
if [[ -n "$impair" && "$impair_after" -eq 0 ]]; then
  for i in $(seq 1 "$links"); do link_tx "$i"; done >"$impair_marks"
  apply_impair
fi

spec() { echo "net_af_packet0,iface=$1,qdisc_bypass=1,framecnt=4096"; }
tcp_port=$(tcp_port)
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
if [[ -n "$impair" && "$impair_after" -gt 0 ]]; then
  # Mid-run: watch the links' counters (not the clock) from inside R2,
  # where reading them costs no process.
  (
    ip netns exec "$R2" bash -c '
      links=$1 prefix=$2 after=$3 server=$4
      while kill -0 "$server" 2>/dev/null; do
        s=0
        for ((i = 1; i <= links; i++)); do
          read -r v <"/sys/class/net/${prefix}m$i/statistics/tx_packets"; s=$((s + v))
        done
        ((s >= after)) && exit 0
        sleep 0.002
      done
      exit 1' _ "$links" "$t" "$impair_after" "$server_pid" || exit 0
    for i in $(seq 1 "$links"); do
      ip netns exec "$R2" cat "/sys/class/net/${t}m$i/statistics/tx_packets"
    done >"$impair_marks"
    apply_impair
    echo "netns-ecmp: link 2 impaired ($impair) after $impair_after packets"
  ) &
  impair_pid=$!
fi
set +e
echo "---- client (198.18.2.2) ----"
ip netns exec "$B" "$bin" "${common[@]}" --lcore 1 --dev-port "$(spec "${t}b")" \
  --ip 198.18.2.2 --gateway 198.18.2.1 "$@" 198.19.0.1
client_rc=$?
wait "$server_pid"
server_rc=$?
server_pid=
if [[ -n "${impair_pid:-}" ]]; then wait "$impair_pid"; impair_pid=; fi
set -e
echo
echo "---- server (198.18.1.2) ----"
cat "$server_log"
counts=()
for i in $(seq 1 "$links"); do
  counts+=("$(link_tx "$i")")
  echo "R2 link $i (towards A): given ${counts[-1]} packets"
done
if [[ "$impair" == slow:* ]]; then
  ip netns exec "$R2" tc -s qdisc show dev "${t}m2" | grep -E "dropped" | head -1 || true
fi
if [[ $client_rc -ne 0 || $server_rc -ne 0 ]]; then
  echo "netns-ecmp: client exited $client_rc, server $server_rc" >&2
  exit 1
fi
fail=0
if [[ -n "$expect_even" ]]; then
  total=0; for c in "${counts[@]}"; do total=$((total + c)); done
  for i in "${!counts[@]}"; do
    # |count - total/links| <= PCT% of total/links, in integers.
    dev=$(( (counts[i] * links - total) * 100 ))
    (( dev < 0 )) && dev=$(( -dev ))
    if (( dev > expect_even * total )); then
      echo "netns-ecmp: link $((i + 1)) carried ${counts[i]} of $total packets: not within $expect_even% of even" >&2
      fail=1
    fi
  done
fi
if [[ -s "$impair_marks" ]]; then
  mapfile -t marks <"$impair_marks"
  others=0
  for i in "${!counts[@]}"; do
    [[ $i -eq 1 ]] || others=$((others + counts[i] - marks[i]))
  done
  after=$((counts[1] - marks[1]))
  echo "netns-ecmp: after the impairment link 2 was given $after packets, the others $others"
  if [[ $expect_off -eq 1 ]] && (( after * 10 >= others )); then
    echo "netns-ecmp: link 2 was still given a tenth or more of the traffic after it was impaired" >&2
    fail=1
  fi
elif [[ $expect_off -eq 1 ]]; then
  echo "netns-ecmp: the impairment was never applied" >&2
  exit 1
fi
exit $fail

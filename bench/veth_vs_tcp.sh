#!/usr/bin/env bash
# Braid through the kernel-facing PMDs beside the kernel's TCP, on the same
# path: two network namespaces joined by a veth pair at MTU 1500 and 9000,
# one process per core (server core 0, client core 1), alternated in one
# run, ROUNDS (default 3) rounds. Each cell lists every round.
#   bench/veth_vs_tcp.sh            (MTUS="1500 3400 9000" ROUNDS=3 SECONDS_PER_RUN=3)
# Columns, per MTU:
#   raw AF_PACKET, raw AF_XDP
#                   bench/raw_blaster's frames of MTU + 14 bytes, payloads
#                   copied in and out as a transport must (--copy 1): the
#                   PMD's own limit on this path, in MiB/s of frame bytes
#   Braid AF_PACKET, AF_XDP
#                   braid_write_bw -s 65536 (scripts/netns-loopback.sh);
#                   AF_XDP up to MTU 3400 (its frames fit 4 KB buffers)
#   TCP             qperf tcp_bw (64 KiB messages) on a veth pair of its own
# and latency: braid_write_lat -s 2 t_typical (AF_PACKET) against qperf
# tcp_lat (its one-way latency, half a round trip). Goodput in MiB/s of
# payload (TCP: qperf's GB/s of payload converted).
# Needs root, a release build (braid_raw_blaster, braid_write_bw,
# braid_write_lat) and qperf.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="$(realpath "${BRAID_BUILD_DIR:-build/release}")"
raw="$build_dir/bench/braid_raw_blaster"
rounds="${ROUNDS:-3}"
secs="${SECONDS_PER_RUN:-3}"
mtus="${MTUS:-1500 3400 9000}"
source scripts/lib/build.sh
source scripts/lib/netns.sh
braid_need veth_vs_tcp "$raw" "$build_dir/apps/perftest/braid_write_bw" \
  "$build_dir/apps/perftest/braid_write_lat"
command -v qperf >/dev/null || { echo "veth_vs_tcp: qperf not found (apt-get install qperf)" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "veth_vs_tcp: needs root" >&2; exit 77; }
work=$(mktemp -d /tmp/braid-veth.XXXXXX)
tag="bvt$$"
cleanup() {
  # The measures run in subshells: their namespaces by name, and whatever
  # still runs in them (a sink or a qperf server left by an interrupt).
  local ns
  for ns in "$tag-a" "$tag-b"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# veth_pair <mtu>: namespaces $tag-a, $tag-b joined by veth ${tag}a/${tag}b
# (the caller, a subshell, removes them with netns_cleanup).
veth_pair() {
  netns_make veth_vs_tcp "$tag-a" "$tag-b"
  netns_link "$tag-a" "${tag}a" "$tag-b" "${tag}b" "$1"
}

port_spec() { # port_spec <pmd> <iface> <mtu>: as scripts/netns-loopback.sh opens it
  case "$1" in
    af_packet)
      local spec="net_af_packet0,iface=$2,qdisc_bypass=1,framecnt=4096"
      [[ "$3" -gt 1500 ]] && spec+=",framesz=10240,blocksz=20480"
      echo "$spec" ;;
    af_xdp) echo "net_af_xdp0,iface=$2,start_queue=0,queue_count=1,busy_budget=0" ;;
  esac
}

# raw <pmd> <mtu>: the sink's Gb/s of frames with copies, as MiB/s.
raw() {
  local pmd="$1" mtu="$2" size=$(($2 + 14)) out
  veth_pair "$mtu"
  ip netns exec "$tag-a" taskset -c 0 "$raw" --mode sink --lcore 0 --mtu "$mtu" --size "$size" \
    --seconds "$secs" --copy 1 --port "$(port_spec "$pmd" "${tag}a" "$mtu")" >"$work/sink.log" 2>&1 &
  local spid=$!
  sleep 1  # (the sink counts from the first blast frame; the blaster needs it listening)
  ip netns exec "$tag-b" taskset -c 1 "$raw" --mode blast --lcore 1 --mtu "$mtu" --size "$size" \
    --seconds "$secs" --copy 1 --port "$(port_spec "$pmd" "${tag}b" "$mtu")" >"$work/blast.log" 2>&1 || true
  wait "$spid" || true
  netns_cleanup
  grep -q ' ok=1' "$work/sink.log" && out=$(grep -o ' gbps=[^ ]*' "$work/sink.log" | cut -d= -f2)
  [[ -n "${out:-}" ]] || { echo "veth_vs_tcp: raw $pmd at MTU $mtu gave nothing:" >&2; cat "$work/sink.log" "$work/blast.log" >&2; exit 1; }
  awk -v g="$out" 'BEGIN { printf "%.0f", g * 1e9 / 8 / 1048576 }'
}

braid_bw() { # braid_bw <pmd> <mtu>
  local out
  out=$(BRAID_BUILD_DIR="$build_dir" scripts/netns-loopback.sh --pmd "$1" --mtu "$2" \
    braid_write_bw -s 65536 -D "$secs" 2>&1) || { echo "veth_vs_tcp: braid $1 $2 failed:" >&2; tail -n 20 <<<"$out" >&2; exit 1; }
  awk '$1 == 65536 && $2 ~ /^[0-9]+$/ { print $4; exit }' <<<"$out"
}

braid_lat() { # t_typical of 2-byte WRITEs over AF_PACKET
  local out
  out=$(BRAID_BUILD_DIR="$build_dir" scripts/netns-loopback.sh --pmd af_packet --mtu "$1" \
    braid_write_lat -s 2 -n 20000 2>&1) || { echo "veth_vs_tcp: braid_write_lat failed:" >&2; tail -n 20 <<<"$out" >&2; exit 1; }
  awk '$1 == 2 && $2 ~ /^[0-9]+$/ { print $5; exit }' <<<"$out"
}

# tcp <mtu>: qperf tcp_bw (MiB/s) and tcp_lat (us) between the namespaces.
tcp() {
  local mtu="$1" out bw lat
  veth_pair "$mtu"
  ip -n "$tag-a" addr add 198.18.7.1/24 dev "${tag}a"
  ip -n "$tag-b" addr add 198.18.7.2/24 dev "${tag}b"
  ip netns exec "$tag-a" taskset -c 0 qperf >/dev/null 2>&1 &
  local qpid=$!
  sleep 0.5
  out=$(ip netns exec "$tag-b" taskset -c 1 qperf -t "$secs" 198.18.7.1 tcp_bw tcp_lat 2>&1) || true
  kill "$qpid" 2>/dev/null || true
  wait "$qpid" 2>/dev/null || true
  netns_cleanup
  bw=$(awk '/bw *=/ { v = $3; u = $4 } END { if (u == "GB/sec") v *= 1e9; else if (u == "MB/sec") v *= 1e6; printf "%.0f", v / 1048576 }' <<<"$out")
  lat=$(awk '/latency *=/ { v = $3; u = $4 } END { if (u == "ms") v *= 1000; printf "%.1f", v }' <<<"$out")
  if [[ "$bw" == 0 ]] || ! grep -q 'latency *=' <<<"$out"; then
    echo "veth_vs_tcp: qperf gave no bandwidth or no latency:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "$bw $lat"
}

declare -A cell
for ((r = 1; r <= rounds; ++r)); do
  for mtu in $mtus; do
    cell[raw,$mtu]+="$(raw af_packet "$mtu") "
    cell[afp,$mtu]+="$(braid_bw af_packet "$mtu") "
    if [[ "$mtu" -le 3400 ]]; then
      cell[rawxdp,$mtu]+="$(raw af_xdp "$mtu") "
      cell[xdp,$mtu]+="$(braid_bw af_xdp "$mtu") "
    fi
    tcp "$mtu" >"$work/tcp"  # (exits the script on failure, as the others)
    read -r bw lat <"$work/tcp"
    cell[tcp,$mtu]+="$bw "
    cell[tcplat,$mtu]+="$lat "
    cell[lat,$mtu]+="$(braid_lat "$mtu") "
  done
  echo "round $r done" >&2
done
echo "| veth, MTU ($rounds rounds) | raw AF_PACKET, copied (MiB/s of frames) | Braid AF_PACKET (MiB/s) | raw AF_XDP, copied | Braid AF_XDP | TCP, qperf tcp_bw (MiB/s) | Braid write_lat t_typical, AF_PACKET (us) | TCP, qperf tcp_lat (us) |"
echo "|---|---|---|---|---|---|---|---|"
for mtu in $mtus; do
  echo "| $mtu | ${cell[raw,$mtu]}| ${cell[afp,$mtu]}| ${cell[rawxdp,$mtu]:--}| ${cell[xdp,$mtu]:--}| ${cell[tcp,$mtu]}| ${cell[lat,$mtu]}| ${cell[tcplat,$mtu]}|"
done

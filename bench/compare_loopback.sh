#!/usr/bin/env bash
# Braid's perftest tools against the raw limit of the same virtual NIC path,
# measured in the same run by bench/raw_blaster.cc (one process per core:
# the server side -- vhost-user / memif server, sink or echo -- on core 0,
# the client side -- virtio-user / memif client, blast or ping -- on core 1,
# with the vdev specs of scripts/loopback.sh).
#   bench/compare_loopback.sh [virtio|memif]
# Needs a release build:
#   cmake --preset release && cmake --build --preset release -j1 \
#     --target braid_raw_blaster braid_write_bw braid_write_lat
# (a) 64 B: raw blast->sink Mpps vs braid_write_bw -s 64 -n 200000 MsgRate
# (b) 1514 B frames (64 KiB WRITEs at MTU 1500): raw Gb/s of frame bytes vs
#     braid_write_bw -s 65536 -n 5000 BW average in Gb/s
# (c) raw ping one-way p50 (RTT/2, 64 B frames) vs braid_write_lat -n 5000
#     t_typical
# Only MTU 1500: virtio-user needs RX buffers >= MTU for jumbo, and Braid's
# DPDK backend refuses memif MTU > 1500.
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-virtio}"
build_dir="${BRAID_BUILD_DIR:-build/release}"
raw="$build_dir/bench/braid_raw_blaster"
seconds="${RAW_SECONDS:-5}"
samples="${RAW_SAMPLES:-10000}"
for b in "$raw" "$build_dir/apps/perftest/braid_write_bw" "$build_dir/apps/perftest/braid_write_lat"; do
  [[ -x "$b" ]] || { echo "compare: $b not built (see the header of $0)" >&2; exit 1; }
done
[[ "$path" == virtio || "$path" == memif ]] || { echo "compare: path must be virtio or memif" >&2; exit 2; }

work=$(mktemp -d /tmp/braid-compare.XXXXXX)
trap 'rm -rf "$work"' EXIT

# raw_pair <server mode> <client mode> <extra args...>: prints both RESULT lines.
raw_pair() {
  local smode="$1" cmode="$2"
  shift 2
  local dir sock sport cport
  dir=$(mktemp -d "$work/raw.XXXXXX")
  case "$path" in
    virtio)
      sock="$dir/vhost.sock"
      sport="net_vhost0,iface=$sock,queues=1"
      cport="net_virtio_user0,path=$sock,queues=1"
      ;;
    memif)
      sock="$dir/memif.sock"
      sport="net_memif0,role=server,id=0,socket=$sock,socket-abstract=no"
      cport="net_memif0,role=client,id=0,socket=$sock,socket-abstract=no"
      ;;
  esac
  taskset -c 0 "$raw" --mode "$smode" --lcore 0 --port "$sport" "$@" >"$dir/server.log" 2>&1 &
  local spid=$!
  for _ in $(seq 1 200); do
    [[ -S "$sock" ]] && break
    kill -0 "$spid" 2>/dev/null || break
    sleep 0.05
  done
  taskset -c 1 "$raw" --mode "$cmode" --lcore 1 --port "$cport" "$@" >"$dir/client.log" 2>&1 || true
  wait "$spid" || true
  grep -h '^RESULT' "$dir/server.log" "$dir/client.log" || {
    echo "compare: raw $smode/$cmode produced no result; logs:" >&2
    tail -20 "$dir/server.log" "$dir/client.log" >&2
  }
}

field() { # field <name> <text>: value of name=... in a RESULT line
  grep -o " $1=[^ ]*" <<<"$2" | head -1 | cut -d= -f2
}

braid() { # braid <tool> <args...>: the client's and server's output
  scripts/loopback.sh --path "$path" "$@" 2>&1 || echo "compare: loopback $* failed" >&2
}

# First data row whose #bytes column is $1: column $2.
row_col() {
  awk -v s="$1" -v c="$2" '$1 == s && NF >= c && $2 ~ /^[0-9]+$/ { print $c; exit }'
}

echo "== path $path: raw runs (${seconds}s windows, $samples ping samples) and Braid's tools"

raw64=$(raw_pair sink blast --size 64 --seconds "$seconds")
echo "$raw64"
raw1514=$(raw_pair sink blast --size 1514 --seconds "$seconds")
echo "$raw1514"
rawping=$(raw_pair echo ping --size 64 --samples "$samples")
echo "$rawping"

bw64_out=$(braid braid_write_bw -s 64 -n 200000)
bw64k_out=$(braid braid_write_bw -s 65536 -n 5000)
lat_out=$(braid braid_write_lat -n 5000)
echo "$bw64_out" >"$work/bw64.log"
echo "$bw64k_out" >"$work/bw64k.log"
echo "$lat_out" >"$work/lat.log"

raw_mpps=$(field mpps "$(grep 'mode=sink' <<<"$raw64")")
raw_gbps=$(field gbps "$(grep 'mode=sink' <<<"$raw1514")")
raw_mpps1514=$(field mpps "$(grep 'mode=sink' <<<"$raw1514")")
raw_p50=$(field p50_us "$(grep 'mode=ping' <<<"$rawping")")
raw_p99=$(field p99_us "$(grep 'mode=ping' <<<"$rawping")")
braid_rate=$(row_col 64 5 <<<"$bw64_out")
braid_mib=$(row_col 65536 4 <<<"$bw64k_out")
braid_typ=$(row_col 2 5 <<<"$lat_out")

for v in raw_mpps raw_gbps raw_p50 braid_rate braid_mib braid_typ; do
  if [[ -z "${!v}" ]]; then
    echo "compare: no value for $v; tool output follows" >&2
    cat "$work"/*.log >&2
    exit 1
  fi
done

awk -v path="$path" -v rm="$raw_mpps" -v rg="$raw_gbps" -v rm15="$raw_mpps1514" \
  -v rp="$raw_p50" -v rp99="$raw_p99" -v br="$braid_rate" -v bm="$braid_mib" -v bt="$braid_typ" '
BEGIN {
  bg = bm * 8 * 1048576 / 1e9
  printf "\n| path %s | raw | Braid | ratio / gap | goal | met |\n", path
  printf "|---|---|---|---|---|---|\n"
  r1 = br / rm
  printf "| 64 B rate (Mpps) | %.2f | %.2f | %.0f%% | >= 50%% | %s |\n", rm, br, 100 * r1, (r1 >= 0.5) ? "yes" : "no"
  r2 = bg / rg
  printf "| 64 KiB WRITE vs 1514 B frames (Gb/s) | %.2f (%.2f Mpps) | %.2f (%.1f MiB/s) | %.0f%% | >= 70%% | %s |\n", rg, rm15, bg, bm, 100 * r2, (r2 >= 0.7) ? "yes" : "no"
  d = bt - rp
  printf "| latency (us): raw one-way p50 (p99) vs write_lat t_typical | %.2f (%.2f) | %.2f | %+.2f us | <= +0.5 us | %s |\n", rp, rp99, bt, d, (d <= 0.5) ? "yes" : "no"
}'

#!/usr/bin/env bash
# The NCCL plugin against Braid's own perftest tools on the same virtual NIC
# path, side by side in one run, ROUNDS times alternated:
#   braid_nccl_bench --mode bw (scripts/nccl-ranks.sh): median half round
#     trip of isend/irecv ping-pong, and bandwidth with 32 requests in flight
#     (NCCL_NET_MAX_REQUESTS);
#   braid_write_lat -a (t_typical) and braid_write_bw -a, at -t 32 (the same
#     depth) and at perftest's default depth 128.
# Prints one row per size with the medians and the plugin's ratios.
#   ROUNDS=3 bench/nccl_vs_raw.sh [memif|virtio]
# Needs a release build (braid_nccl_bench, the plugin, braid_write_bw/lat).
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-memif}"
rounds="${ROUNDS:-3}"
export BRAID_BUILD_DIR="${BRAID_BUILD_DIR:-build/release}"
work=$(mktemp -d /tmp/braid-nccl-vs-raw.XXXXXX)
trap 'rm -rf "$work"' EXIT
lo=65536
hi=8388608
for ((round = 1; round <= rounds; round++)); do
  scripts/nccl-ranks.sh --path "$path" --mode bw --min-bytes "$lo" --max-bytes "$hi" 2>/dev/null |
    awk '$1 ~ /^[0-9]+$/ && NF == 5 { print $1, $3, $5 }' >"$work/plugin.$round"
  scripts/loopback.sh --path "$path" braid_write_lat -a -n 1000 2>/dev/null |
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 { print $1, $5 }' >"$work/lat.$round"
  for depth in 32 128; do
    scripts/loopback.sh --path "$path" braid_write_bw -a -n 2000 -t "$depth" 2>/dev/null |
      awk '$1 ~ /^[0-9]+$/ && NF >= 4 { print $1, $4 }' >"$work/bw$depth.$round"
  done
done
median() { sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : "nan" }'; }
value() {  # value <file prefix> <size> <column>
  for ((round = 1; round <= rounds; round++)); do
    awk -v s="$2" -v c="$3" '$1 == s { print $c }' "$work/$1.$round"
  done | median
}
echo "path $path, $rounds rounds (medians); latency in us, bandwidth in MiB/s"
printf "%10s | %8s %8s %6s | %9s %9s %9s %6s %6s\n" "#bytes" "plug lat" "raw lat" "ratio" \
  "plug bw" "raw bw32" "raw bw128" "/bw32" "/bw128"
for ((s = lo; s <= hi; s *= 2)); do
  pl=$(value plugin "$s" 2); pb=$(value plugin "$s" 3)
  rl=$(value lat "$s" 2); b32=$(value bw32 "$s" 2); b128=$(value bw128 "$s" 2)
  awk -v s="$s" -v pl="$pl" -v rl="$rl" -v pb="$pb" -v b32="$b32" -v b128="$b128" 'BEGIN {
    printf "%10d | %8.2f %8.2f %6.2f | %9.1f %9.1f %9.1f %6.2f %6.2f\n",
      s, pl, rl, pl / rl, pb, b32, b128, pb / b32, pb / b128 }'
done

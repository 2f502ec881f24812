#!/usr/bin/env bash
# Debian's unmodified ucx_perftest over Braid (UCX_TLS=rc_verbs,ud_verbs
# through Braid's libibverbs.so.1 on a vNIC pair) beside the same test over
# UCX's own TCP on loopback, alternated in one run (one process per core):
#   bench/ucx_vs_tcp.sh [memif|virtio]
# Tag-matching latency (tag_lat, 8 B: the 50th percentile and the average,
# us) and bandwidth (tag_bw at 64 KiB and 1 MiB, MB/s), ROUNDS (default 3)
# alternated rounds; each cell lists every round. Needs a release build and
# ucx-utils; runs as root (scripts/lib/ucx-device.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-memif}"
rounds="${ROUNDS:-3}"
lat_iters="${LAT_ITERS:-20000}"
bw_iters="${BW_ITERS:-2000}"
work=$(mktemp -d /tmp/braid-ucx-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

# final <tls> <ucx_perftest args...>: the client's Final row.
final() {
  local tls="$1"
  shift
  if ! scripts/ucx-loopback.sh --path "$path" --tls "$tls" "$@" >"$work/log" 2>&1; then
    echo "ucx_vs_tcp: $tls $* failed:" >&2
    tail -n 30 "$work/log" >&2
    exit 1
  fi
  grep -m1 '^Final:' "$work/log"
}

declare -A cell
for ((r = 1; r <= rounds; ++r)); do
  for tls in rc_verbs,ud_verbs tcp; do
    row=$(final "$tls" -t tag_lat -n "$lat_iters")
    cell[$tls,lat50]+="$(awk '{print $3}' <<<"$row") "
    cell[$tls,latavg]+="$(awk '{print $4}' <<<"$row") "
    for size in 65536 1048576; do
      row=$(final "$tls" -t tag_bw -s "$size" -n "$bw_iters")
      cell[$tls,bw$size]+="$(awk '{printf "%.0f", $6}' <<<"$row") "
    done
  done
done
printf '| measure (%s, %s rounds) | Braid: UCX_TLS=rc_verbs,ud_verbs | UCX_TLS=tcp (loopback) |\n' \
  "$path" "$rounds"
printf '|---|---|---|\n'
printf '| tag_lat 8 B, p50 us | %s| %s|\n' "${cell[rc_verbs,ud_verbs,lat50]}" "${cell[tcp,lat50]}"
printf '| tag_lat 8 B, average us | %s| %s|\n' "${cell[rc_verbs,ud_verbs,latavg]}" "${cell[tcp,latavg]}"
printf '| tag_bw 64 KiB, MB/s | %s| %s|\n' "${cell[rc_verbs,ud_verbs,bw65536]}" "${cell[tcp,bw65536]}"
printf '| tag_bw 1 MiB, MB/s | %s| %s|\n' "${cell[rc_verbs,ud_verbs,bw1048576]}" "${cell[tcp,bw1048576]}"

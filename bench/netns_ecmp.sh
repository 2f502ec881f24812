#!/usr/bin/env bash
# Issue 11's real-datapath cases, side by side in one run: Braid on AF_PACKET
# through two Linux routers joined by 2 and 4 equal-cost links
# (scripts/netns-ecmp.sh), healthy and with link 2 impaired mid-run:
# silently dropping everything, rate-limited by tbf to a tenth of the
# healthy run's goodput, or taken down. Each case runs with REPS (Braid's
# default) and with round robin, and prints goodput against the healthy run
# of the same link count and policy, and how losses were found.
#   bench/netns_ecmp.sh [seconds per run (default 6)] [links...]
# Needs root and a release build (cmake --build --preset release).
set -uo pipefail
cd "$(dirname "$0")/.."
secs="${1:-6}"
shift || true
link_counts=("${@:-2 4}")
read -r -a link_counts <<<"${link_counts[*]}"
out=$(mktemp -d /tmp/braid-ecmp-bench.XXXXXX)
printf "%-5s %-12s %-11s %10s %8s %9s %9s %6s %s\n" links case paths "MiB/s" "vs ok" inferred "timed out" rc "link 2 share after"
for links in "${link_counts[@]}"; do
  for paths in reps round-robin; do
    healthy=
    for case in healthy silent slow down; do
      args=(--links "$links")
      case "$case" in
        silent | down) args+=(--impair "$case" --impair-after 100000) ;;
        slow)
          # A tenth of the healthy run's goodput, in Mb/s.
          rate=$(awk -v g="$healthy" 'BEGIN { printf "%d", g * 8.388608 / 10 }')
          args+=(--impair "slow:${rate}mbit" --impair-after 100000) ;;
      esac
      [[ "$case" == silent ]] && args+=(--expect-off)
      log="$out/$links-$paths-$case.log"
      BRAID_ECMP_SEED="${BRAID_ECMP_SEED:-2}" scripts/netns-ecmp.sh "${args[@]}" braid_write_bw \
        -s 65536 -D "$secs" --stats --paths "$paths" >"$log" 2>&1
      rc=$?
      bw=$(awk '$1 == 65536 && NF >= 5 { print $4; exit }' "$log")
      bw=${bw:-0}
      [[ "$case" == healthy ]] && healthy="$bw"
      ratio=$(awk -v b="$bw" -v h="$healthy" 'BEGIN { if (h > 0) printf "%.2f", b / h; else print "-" }')
      inferred=$(grep -m1 " Lost: inferred" "$log" | sed -n 's/.*inferred \([0-9]*\).*/\1/p')
      timed=$(grep -m1 " Lost: inferred" "$log" | sed -n 's/.*timed out \([0-9]*\).*/\1/p')
      share=$(sed -n 's/.*after the impairment link 2 was given \([0-9]*\) packets, the others \([0-9]*\)/\1 vs \2/p' "$log")
      [[ "$case" == slow ]] && share="$share (tbf ${rate} Mb/s)"
      printf "%-5s %-12s %-11s %10s %8s %9s %9s %6s %s\n" "$links" "$case" "$paths" "$bw" "$ratio" \
        "${inferred:--}" "${timed:--}" "$rc" "$share"
    done
  done
done
echo "logs: $out"

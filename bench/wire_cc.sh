#!/usr/bin/env bash
# Congestion control on the real datapath (issue 33): Braid's hosts through
# braid_switch (scripts/switch-fabric.sh: DPDK memif ports, one core for the
# switch, one for the hosts), each scenario with --cc fixed, nscc and dcqcn
# side by side in one run. Host ports send at HOST_MBPS (default 2000); the
# core link is the bottleneck, with WRED ECN from KMIN to KMAX bytes
# (default 15000 to 60000, at most 20% marked).
#   bench/wire_cc.sh [scenario ...]     (default: all)
# CCS="fixed nscc dcqcn" picks the algorithms; TOOL_ARGS="..." adds options
# to every braid_write_bw (e.g. "--base-rtt-us 50").
# Scenarios:
#   ratio1 ratio4 ratio40   1 flow, core link 1x, 4x, 40x slower than the host port
#   share2 share4 share8    2, 4, 8 flows (pairs of hosts) through one core link 4x slower
#   degraded                2 core links at half the host rate, one cut to a quarter of that
#   blackhole               the same, one link blackholed after 20,000 frames
# Prints one row per scenario and algorithm: goodput of each flow (MiB/s),
# their sum as a share of the bottleneck, Jain's index over the flows, and
# the median queue data frames found at the bottleneck (bytes).
# Two cores: the hosts' core can be the bottleneck above ~2 Gb/s; the
# timings are the VM's (spells), the switch's counters exact.
set -euo pipefail
cd "$(dirname "$0")/.."
host=${HOST_MBPS:-2000}
kmin=${KMIN:-15000}
kmax=${KMAX:-60000}
seconds=${SECONDS_PER_RUN:-4}
scenarios=("$@")
[[ ${#scenarios[@]} -eq 0 ]] && scenarios=(ratio1 ratio4 ratio40 share2 share4 share8 degraded blackhole)
ccs=(${CCS:-fixed nscc dcqcn})

run() { # run <scenario> <cc>: prints the table row
  local sc="$1" cc="$2" pairs=1 links=1 core=$host set_args=() bottleneck
  case "$sc" in
    ratio1) core=$host ;;
    ratio4) core=$((host / 4)) ;;
    ratio40) core=$((host / 40)) ;;
    share2) pairs=2; core=$((host / 4)) ;;
    share4) pairs=4; core=$((host / 4)) ;;
    share8) pairs=8; core=$((host / 4)) ;;
    degraded) links=2; core=$((host / 2)); set_args=(--set "'link 1 rate $((host / 8))'") ;;
    blackhole) links=2; core=$((host / 2)); set_args=(--set "'@20000 link 1 blackhole'") ;;
    *) echo "wire_cc: unknown scenario $sc" >&2; exit 2 ;;
  esac
  case "$sc" in
    degraded) bottleneck=$((core + host / 8)) ;;
    blackhole) bottleneck=$core ;;
    *) bottleneck=$((core * links)) ;;
  esac
  local sw="--rate-mbps $host --core-rate-mbps $core --core-ecn $kmin,$kmax,0.2 ${set_args[*]}"
  local out
  out=$(scripts/switch-fabric.sh --pairs "$pairs" --links "$links" --switch "$sw" --expect-fair 0 \
    braid_write_bw -s 65536 -D "$seconds" --cc "$cc" ${TOOL_ARGS:-} 2>&1) || {
    local log
    log=$(mktemp /tmp/wire_cc.XXXXXX.log)
    printf '%s\n' "$out" >"$log"
    echo "| $sc | $cc | failed (output in $log) |"
    return
  }
  local goodputs jain p50
  goodputs=$(grep -m1 "switch-fabric: goodputs" <<<"$out" | sed 's/.*goodputs \(.*\) MiB.*/\1/')
  jain=$(grep -m1 "switch-fabric: goodputs" <<<"$out" | sed 's/.*Jain \([0-9.]*\).*/\1/')
  # The bottleneck's queue: the median of the core link direction that
  # carried the most data.
  p50=$(grep "^link " <<<"$out" | sed -n 's/.* bytes, \([0-9]*\) data).*queue found by data p50 \([0-9]*\) .*/\1 \2/p' |
    sort -n | tail -1 | cut -d' ' -f2)
  awk -v sc="$sc" -v cc="$cc" -v g="$goodputs" -v b="$bottleneck" -v j="$jain" -v q="$p50" 'BEGIN {
    n = split(g, x, " "); s = 0; for (i = 1; i <= n; ++i) s += x[i]
    printf "| %s | %s | %s | %.0f%% | %s | %s |\n", sc, cc, g, 100 * s * 1048576 * 8 / (b * 1e6), j, q
  }'
}

echo "host ports $host Mb/s, WRED $kmin-$kmax B on the core links, ${seconds} s per run"
echo "| scenario | cc | goodputs (MiB/s) | of bottleneck | Jain | queue p50 (B) |"
echo "|---|---|---|---|---|---|"
for sc in "${scenarios[@]}"; do
  for cc in "${ccs[@]}"; do run "$sc" "$cc"; done
done

#!/usr/bin/env bash
# Congestion control on the real datapath (issue 33): Braid's hosts through
# braid_switch (scripts/switch-fabric.sh: DPDK memif ports, one core for the
# switch, one for the hosts), each scenario with --cc fixed, nscc and dcqcn
# side by side in one run. Host ports send at HOST_MBPS (default 2000); the
# core link is the bottleneck, with WRED ECN from KMIN to KMAX bytes
# (default 15000 to 60000, at most 20% marked).
#   bench/wire_cc.sh [scenario ...]     (default: all)
# CCS="fixed nscc dcqcn" picks the algorithms; TOOL_ARGS="..." adds options
# to every braid_write_bw (e.g. "--base-rtt-us 50"); UPLINKS=1 paces what each
# host sends at the host rate (braid_switch --uplink-rate-mbps), as a NIC would.
# Scenarios:
#   ratio1 ratio4 ratio40   1 flow, core link 1x, 4x, 40x slower than the host port
#   share2 share4 share8    2, 4, 8 flows (pairs of hosts) through one core link 4x slower
#   degraded                2 core links at half the host rate, one cut to a quarter of that
#   blackhole               the same, one link blackholed after 20,000 frames
# Prints one row per scenario and algorithm (incasts in a table of their own): goodput of each flow (MiB/s),
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
flow_mib=${FLOW_MIB:-32}
scenarios=("$@")
[[ ${#scenarios[@]} -eq 0 ]] && scenarios=(ratio1 ratio4 ratio40 share2 share4 share8 degraded blackhole
  incast4 incast8 incast4c incast8c)
ccs=(${CCS:-fixed nscc dcqcn})

failed() { # failed <scenario> <cc> <output>: keeps the output, prints the row
  local log
  log=$(mktemp /tmp/wire_cc.XXXXXX.log)
  printf '%s\n' "$3" >"$log"
  echo "| $1 | $2 | failed (output in $log) |"
}

goodputs_and_jain() { # <switch-fabric output>: the goodputs, a tab, Jain's index
  local line
  line=$(grep -m1 "switch-fabric: goodputs" <<<"$1")
  printf '%s\t%s\n' "$(sed 's/.*goodputs \(.*\) MiB.*/\1/' <<<"$line")" \
    "$(sed 's/.*Jain \([0-9.]*\).*/\1/' <<<"$line")"
}

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
  local sw="--rate-mbps $host --core-rate-mbps $core --core-ecn $kmin,$kmax,0.2 ${UPLINKS:+--uplink-rate-mbps $host} ${set_args[*]}"
  local out
  out=$(scripts/switch-fabric.sh --pairs "$pairs" --links "$links" --switch "$sw" --expect-fair 0 \
    braid_write_bw -s 65536 -D "$seconds" --cc "$cc" ${TOOL_ARGS:-} 2>&1) || {
    failed "$sc" "$cc" "$out"
    return
  }
  local goodputs jain p50
  IFS=$'\t' read -r goodputs jain < <(goodputs_and_jain "$out")
  # The bottleneck's queue: the median of the core link direction that
  # carried the most data.
  p50=$(grep "^link " <<<"$out" | sed -n 's/.* bytes, \([0-9]*\) data).*queue found by data p50 \([0-9]*\) .*/\1 \2/p' |
    sort -n | tail -1 | cut -d' ' -f2)
  awk -v sc="$sc" -v cc="$cc" -v g="$goodputs" -v b="$bottleneck" -v j="$jain" -v q="$p50" 'BEGIN {
    n = split(g, x, " "); s = 0; for (i = 1; i <= n; ++i) s += x[i]
    printf "| %s | %s | %s | %.0f%% | %s | %s |\n", sc, cc, g, 100 * s * 1048576 * 8 / (b * 1e6), j, q
  }'
}

incast() { # incast <scenario> <cc>: prints the table row
  local sc="$1" cc="$2" n servers="" credit=() out
  n=${sc#incast}
  [[ "$n" == *c ]] && { credit=(--credit); n=${n%c}; }
  for ((i = 0; i < n; ++i)); do servers+="${servers:+,}$((2 * i))"; done
  local series
  series=$(mktemp /tmp/wire_cc_series.XXXXXX.csv)
  out=$(scripts/switch-fabric.sh --pairs "$n" --links 1 --expect-fair 0 \
    --switch "--rate-mbps $host --ecn $kmin,$kmax,0.2 --host-link $servers --series $series --series-us 200" \
    braid_write_bw -s 65536 -n $((flow_mib * 16)) --stats --cc "$cc" "${credit[@]}" ${TOOL_ARGS:-} 2>&1) || {
    failed "$sc" "$cc" "$out"
    return
  }
  local goodputs jain line timeouts
  IFS=$'\t' read -r goodputs jain < <(goodputs_and_jain "$out")
  line=$(grep -m1 "^host link 0" <<<"$out")
  # Timeouts at the senders (the servers' lines count none).
  timeouts=$(grep -o "timed out [0-9]* (timer expirations [0-9]*, [0-9]* spurious" <<<"$out" |
    awk '{ p += $3; e += $6; s += $7 } END { printf "%d (%d expirations, %d spurious)", p, e, s }')
  # While every sender was delivering (from the last one's first byte to
  # the first one's last), the receiver link's rate over its line rate.
  local overlap
  overlap=$(python3 - "$series" "$host" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
t = [float(r["t_s"]) for r in rows]
link = [int(r["hostlink0_sent"]) for r in rows]
starts, ends = [], []
for col in rows[0]:
    if not col.endswith("_delivered"):
        continue
    d = [int(r[col]) for r in rows]
    if d[-1] == 0:
        continue
    starts.append(next(i for i, v in enumerate(d) if v > 0))
    ends.append(next(i for i, v in enumerate(d) if v == d[-1]))
a, b = max(starts), min(ends)
print("%.3f" % ((link[b] - link[a]) * 8 / (t[b] - t[a]) / (float(sys.argv[2]) * 1e6)) if b > a else "-")
PY
  )
  rm -f "$series"
  awk -v sc="$sc" -v cc="$cc" -v g="$goodputs" -v j="$jain" -v rate="$host" -v t="$timeouts" \
    -v line="$line" -v overlap="$overlap" 'BEGIN {
    match(line, /data [0-9]+ bytes over [0-9]+ us/); split(substr(line, RSTART, RLENGTH), f, " ")
    match(line, /p50 [0-9]+/); p50 = substr(line, RSTART + 4, RLENGTH - 4)
    match(line, /dropped [0-9]+/); drops = substr(line, RSTART + 8, RLENGTH - 8)
    ideal = f[2] * 8 / (rate * 1e6) * 1e6
    printf "| %s | %s | %s | %s | %.3f | %s | %s | %s | %s |\n", sc, cc, g, j, f[5] / ideal, overlap, t, p50, drops
  }'
}

echo "host ports $host Mb/s, WRED $kmin-$kmax B on the core links, ${seconds} s per run"
echo "| scenario | cc | goodputs (MiB/s) | of bottleneck | Jain | queue p50 (B) |"
echo "|---|---|---|---|---|---|"
incasts=()
for sc in "${scenarios[@]}"; do
  [[ "$sc" == incast* ]] && { incasts+=("$sc"); continue; }
  for cc in "${ccs[@]}"; do run "$sc" "$cc"; done
done
if [[ ${#incasts[@]} -gt 0 ]]; then
  echo
  echo "incasts: $flow_mib MiB per client; the receiver's link at $host Mb/s with WRED $kmin-$kmax B;"
  echo "busy/ideal: from its first data frame to its last, over its data bytes at its rate;"
  echo "all sending: its rate over its line rate while every sender was delivering"
  echo "| scenario | cc | goodputs (MiB/s) | Jain | busy / ideal | all sending | sender timeouts | queue p50 (B) | drops |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for sc in "${incasts[@]}"; do
    for cc in "${ccs[@]}"; do incast "$sc" "$cc"; done
  done
fi

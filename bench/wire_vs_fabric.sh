#!/usr/bin/env bash
# The wire beside the simulator (issue 33): bench/wire_cc.sh's scenarios with
# the verbs defaults (NSCC + REPS), once through braid_switch on the real
# datapath and once in braid_fabric with the same rates, buffer, WRED
# thresholds and payload size, one table.
#   bench/wire_vs_fabric.sh [scenario ...]   (default: all of wire_cc.sh's)
# braid_fabric runs them as a leaf-spine: the clients under one leaf, the
# servers under the other, a spine per core link (the bottleneck's rate on
# the spine links), host links at HOST_MBPS; its profile `verbs` is the
# verbs layer's defaults (16 entropies, REPS, NSCC scaled by 25 us and the
# 100 Gb/s memif reports, 2 ms least RTO); 1400 B of payload per packet,
# about what the verbs path carries at MTU 1500. Its hosts answer at once;
# the wire's share one core (their turnaround is 10-300 us).
# Columns: the flows' summed goodput (MiB/s) on each side and their ratio
# (sim / wire), Jain's index, and the bottleneck's median queue (the wire:
# what data frames found; the simulator: over time, sampled every 100 us).
# Incasts: the last flow's FCT over N x bytes at the link's payload rate in
# the simulator, beside the wire's receiver link busy time over its ideal.
set -euo pipefail
cd "$(dirname "$0")/.."
host=${HOST_MBPS:-2000}
scenarios=("$@")
[[ ${#scenarios[@]} -eq 0 ]] && scenarios=(ratio1 ratio4 ratio40 share2 share4 share8 degraded blackhole
  incast4 incast8)
fabric=build/release/apps/braid_fabric
source scripts/lib/build.sh
braid_need wire_vs_fabric "$fabric"
wire=$(CCS=nscc bench/wire_cc.sh "${scenarios[@]}")

sim() { # sim <scenario>: "goodput_sum jain queue_p50" (incast: "goodput_sum jain fct/ideal")
  local sc="$1" n=1 spines=1 core=$host events=() flows=() bytes
  local gbps mib=$((1 << 20))
  case "$sc" in
    ratio1) ;;
    ratio4) core=$((host / 4)) ;;
    ratio40) core=$((host / 40)) ;;
    share2 | share4 | share8) n=${sc#share}; core=$((host / 4)) ;;
    degraded) spines=2; core=$((host / 2)); events=(--event "0 rate core:3 0.25") ;;
    blackhole) spines=2; core=$((host / 2)); events=(--event "100000 loss core:3 1") ;;
    incast4 | incast8) n=${sc#incast}; core=$((host * 50)) ;;
  esac
  # Each flow about 2 s at its share of the bottleneck (incasts: 32 MiB).
  case "$sc" in
    incast*) bytes=$((32 * mib)) ;;
    degraded) bytes=$(((core + host / 8) * 1000000 / 8 * 2 / n)) ;;
    blackhole) bytes=$((core * 1000000 / 8 * 2 / n)) ;;
    *) bytes=$((core * spines * 1000000 / 8 * 2 / n)) ;;
  esac
  for ((i = 0; i < n; ++i)); do
    if [[ "$sc" == incast* ]]; then
      flows+=(--flow "$((n + i)) 0 $bytes")
    else
      flows+=(--flow "$((n + i)) $i $bytes")
    fi
  done
  local ts csv
  ts=$(mktemp /tmp/wire_vs_fabric.XXXXXX.ts)
  csv=$(mktemp /tmp/wire_vs_fabric.XXXXXX.csv)
  gbps=$(awk -v m="$host" 'BEGIN { print m / 1000 }')
  "$fabric" --topology leaf-spine --leaves 2 --spines "$spines" --hosts-per-leaf "$n" \
    --gbps "$gbps" --fabric-gbps "$(awk -v m="$core" 'BEGIN { print m / 1000 }')" --mtu 1400 \
    --no-trim --queue-bytes 1048576 --ecn-kmin-bytes 15000 --ecn-kmax-bytes 60000 --ecn-pmax 0.2 \
    --scenario flows "${flows[@]}" "${events[@]}" --profile verbs --time-limit-ms 60000 \
    --csv "$csv" --timeseries "$ts" --sample-us 100 --watch-core "$spines" >/dev/null
  python3 - "$csv" "$ts" "$sc" "$host" <<'PY'
import csv, sys
flows = [r for r in csv.DictReader(open(sys.argv[1]))]
g = [int(r["bytes"]) / (float(r["fct_us"]) / 1e6) / 2**20 for r in flows]
jain = sum(g) ** 2 / (len(g) * sum(x * x for x in g))
if sys.argv[3].startswith("incast"):
    last = max(float(r["fct_us"]) for r in flows) / 1e6
    ideal = sum(int(r["bytes"]) for r in flows) * 8 / (float(sys.argv[4]) * 1e6)
    print("%.2f %.4f %.3f" % (sum(g), jain, last / ideal))
else:
    rows = list(csv.DictReader(open(sys.argv[2])))
    # The clients' leaf's uplink to the first spine (--watch-core), while
    # the flows run.
    end = max(float(r["fct_us"]) for r in flows)
    q = sorted(int(r["queue_core_up"]) for r in rows if 0 < float(r["time_us"]) <= end)
    print("%.2f %.4f %d" % (sum(g), jain, q[len(q) // 2] if q else 0))
PY
  rm -f "$ts" "$csv"
}

echo "the verbs defaults (NSCC + REPS), host links $host Mb/s, WRED 15-60 KB (20%), 1 MB buffers"
echo "| scenario | wire MiB/s | sim MiB/s | sim / wire | wire Jain | sim Jain | wire queue p50 (B) | sim queue p50 (B) |"
echo "|---|---|---|---|---|---|---|---|"
for sc in "${scenarios[@]}"; do
  [[ "$sc" == incast* ]] && continue
  row=$(grep "^| $sc | nscc |" <<<"$wire" || true)
  read -r sg sj sq < <(sim "$sc")
  awk -v sc="$sc" -v row="$row" -v sg="$sg" -v sj="$sj" -v sq="$sq" 'BEGIN {
    split(row, f, "|"); n = split(f[4], g, " "); w = 0; for (i = 1; i <= n; ++i) w += g[i]
    gsub(/ /, "", f[6]); gsub(/ /, "", f[7])
    printf "| %s | %.2f | %.2f | %.2f | %s | %s | %s | %s |\n", sc, w, sg, (w > 0 ? sg / w : 0), f[6], sj, f[7], sq
  }'
done
if printf '%s\n' "${scenarios[@]}" | grep -q '^incast'; then
  echo
  echo "| scenario | wire MiB/s | sim MiB/s | wire busy / ideal | wire all sending | sim last FCT / ideal |"
  echo "|---|---|---|---|---|---|"
  for sc in "${scenarios[@]}"; do
    [[ "$sc" == incast* ]] || continue
    row=$(grep "^| $sc | nscc |" <<<"$wire" || true)
    read -r sg sj sf < <(sim "$sc")
    awk -v sc="$sc" -v row="$row" -v sg="$sg" -v sf="$sf" 'BEGIN {
      split(row, f, "|"); n = split(f[4], g, " "); w = 0; for (i = 1; i <= n; ++i) w += g[i]
      gsub(/ /, "", f[6]); gsub(/ /, "", f[7])
      printf "| %s | %.2f | %.2f | %s | %s | %s |\n", sc, w, sg, f[6], f[7], sf
    }'
  done
fi

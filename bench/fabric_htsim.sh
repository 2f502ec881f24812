#!/usr/bin/env bash
# Braid's NSCC + REPS in braid_fabric on UEC htsim's own definitions
# (../shared/brief/facts.md), each row the median and range over seeds,
# beside htsim's figure:
# - sizes in decimal bytes (2,000,000 and 16,000,000);
# - 4086 B of payload per packet (Braid's headers make a 4196 B frame where
#   htsim's is 4150 B: 1.1% more on the wire);
# - ECN marked at dequeue;
# - incast senders are hosts 64 on (other pods than the receiver, host 0);
#   ideal = N x payload bytes x 8 / link rate;
# - goodput = size / FCT over the line rate.
#   bench/fabric_htsim.sh              (SEEDS="1 2 3 4 5" by default)
# The 1024-host row (k=16) takes about a minute per seed.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=(${SEEDS:-1 2 3 4 5})
fabric=build/release/apps/braid_fabric
source scripts/lib/build.sh
braid_need fabric_htsim "$fabric"
common=(--mtu 4086 --ecn-dequeue --profile nscc-reps --time-limit-ms 100)
tmp=$(mktemp -d /tmp/fabric_htsim.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# stats <file of numbers>: "median [min-max]"
stats() {
  sort -g "$1" | awk '{ x[NR] = $1 } END {
    m = NR % 2 ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
    printf "%.4g [%.4g-%.4g]", m, x[1], x[NR] }'
}

# run <name> <args...>: one CSV of flows per seed in $tmp/<name>.<seed>.csv
run() {
  local name="$1"
  shift
  for s in "${seeds[@]}"; do
    "$fabric" "${common[@]}" "$@" --seed "$s" --csv "$tmp/$name.$s.csv" >/dev/null
  done
}

# perm <name>: per seed, FCT mean, p99, goodput mean, min
perm() {
  local name="$1"
  for s in "${seeds[@]}"; do
    python3 - "$tmp/$name.$s.csv" <<'PY'
import csv, math, sys
rows = list(csv.DictReader(open(sys.argv[1])))
f = sorted(float(r["fct_us"]) for r in rows)
g = [float(r["goodput_pct"]) for r in rows]
p99 = f[max(0, math.ceil(0.99 * len(f)) - 1)]
print(sum(f) / len(f), p99, sum(g) / len(g), min(g))
PY
  done >"$tmp/$name.rows"
  for c in 1 2 3 4; do awk -v c="$c" '{ print $c }' "$tmp/$name.rows" >"$tmp/$name.c$c"; done
  printf "%s / %s us; %s / %s %%" "$(stats "$tmp/$name.c1")" "$(stats "$tmp/$name.c2")" \
    "$(stats "$tmp/$name.c3")" "$(stats "$tmp/$name.c4")"
}

# incast <name> <senders> <bytes>: last FCT / ideal; Jain
incast() {
  local name="$1" n="$2" bytes="$3"
  for s in "${seeds[@]}"; do
    awk -F, -v n="$n" -v b="$bytes" 'NR > 1 { if ($8 > m) m = $8; g[++k] = $9; s1 += $9; s2 += $9 * $9 }
      END { print m / (n * b * 8 / 100e9 * 1e6), s1 * s1 / (k * s2) }' "$tmp/$name.$s.csv"
  done >"$tmp/$name.rows"
  for c in 1 2; do awk -v c="$c" '{ print $c }' "$tmp/$name.rows" >"$tmp/$name.c$c"; done
  printf "%s; %s" "$(stats "$tmp/$name.c1")" "$(stats "$tmp/$name.c2")"
}

run perm2m --scenario permutation -s 2000000
run perm16m --scenario permutation -s 16000000
run incast8 --scenario incast --incast 8 --incast-from 64 -s 2000000
run incast32 --scenario incast --incast 32 --incast-from 64 -s 2000000
run incast127 --scenario incast --incast 127 -s 2000000  # every other host
echo "NSCC + REPS on htsim's definitions, seeds ${seeds[*]}: median [range]"
echo "| scenario | Braid | htsim |"
echo "|---|---|---|"
echo "| permutation 2 MB: FCT mean / p99; goodput mean / min | $(perm perm2m) | 193/201 us; 82.8/79.2 % |"
echo "| permutation 16 MB: FCT mean / p99; goodput mean / min | $(perm perm16m) | 1420/1482 us; 90.2/85.2 % |"
echo "| incast 8:1, 2 MB: last FCT / ideal; Jain | $(incast incast8 8 2000000) | 1.044; .997 |"
echo "| incast 32:1, 2 MB: last FCT / ideal; Jain | $(incast incast32 32 2000000) | 1.024; .992 |"
echo "| incast 127:1, 2 MB: last FCT / ideal; Jain | $(incast incast127 127 2000000) | 1.035; .981 |"
# Near and far: two senders under the receiver's edge switch (hosts 1 and 2
# into 0), and one of them beside one from another pod (1 and 64 into 0),
# 16 MB each: Jain's index of their goodputs.
run near2 --scenario flows --flow "1 0 16000000" --flow "2 0 16000000"
run nearfar --scenario flows --flow "1 0 16000000" --flow "64 0 16000000"
jain() {
  for s in "${seeds[@]}"; do
    awk -F, 'NR > 1 { g[++k] = $9; s1 += $9; s2 += $9 * $9 } END { print s1 * s1 / (k * s2) }' "$tmp/$1.$s.csv"
  done >"$tmp/$1.j"
  stats "$tmp/$1.j"
}
echo "| 2 near senders into one host, 16 MB: Jain | $(jain near2) | (.936 in Braid before) |"
echo "| a near and a far sender into one host, 16 MB: Jain | $(jain nearfar) | |"
if [[ -z "${SKIP_K16:-}" ]]; then
  run perm2m_k16 --scenario permutation -k 16 -s 2000000
  echo "| 1024 hosts (k=16), permutation 2 MB: FCT mean / p99; goodput mean / min | $(perm perm2m_k16) | 196/204 us; 81.8/77.8 % |"
fi

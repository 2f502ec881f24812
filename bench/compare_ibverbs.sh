#!/usr/bin/env bash
# Debian's unmodified perftest over Braid's libibverbs.so.1 against Braid's
# own perftest-style tools, on the same virtual NIC path, side by side in one
# run (one process per core, as scripts/loopback.sh and
# scripts/ibverbs-loopback.sh place them):
#   bench/compare_ibverbs.sh [memif|virtio]
# Needs a release build (cmake --preset release && cmake --build --preset
# release) and perftest (apt-get install perftest).
# (a) ib_write_bw -s 65536 -n N  vs braid_write_bw -s 65536 -n N: BW average
# (b) ib_write_lat -s 2 -n M     vs braid_write_lat -s 2 -n M: t_typical and t_avg
# N = BW_ITERS (default 20000), M = LAT_ITERS (default 5000).
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-memif}"
[[ "$path" == virtio || "$path" == memif ]] || { echo "compare: path must be memif or virtio" >&2; exit 2; }
build_dir="${BRAID_BUILD_DIR:-build/release}"
source scripts/lib/build.sh
braid_need compare "$build_dir/apps/perftest/braid_write_bw" \
  "$build_dir/apps/perftest/braid_write_lat" "$build_dir/ibverbs/libibverbs.so.1"
command -v ib_write_bw >/dev/null || { echo "compare: perftest not installed" >&2; exit 1; }
bw_iters="${BW_ITERS:-20000}"
lat_iters="${LAT_ITERS:-5000}"
rounds="${ROUNDS:-3}"

work=$(mktemp -d /tmp/braid-compare-ibv.XXXXXX)
trap 'rm -rf "$work"' EXIT

# run <script> <tool> <args...>: the client's table, or the output and exit.
run() {
  local script="$1"
  shift
  local log="$work/run.log"
  if ! "scripts/$script" --path "$path" "$@" >"$log" 2>&1; then
    echo "compare: $script $* failed; its output without DPDK's log lines:" >&2
    grep -v '^EAL\|^VHOST_CONFIG\|^TELEMETRY' "$log" | tail -n 40 >&2
    exit 1
  fi
  cat "$log"
}
# First data row whose #bytes column is $1: column $2.
row_col() {
  awk -v s="$1" -v c="$2" '$1 == s && NF >= c && $2 ~ /^[0-9]+$/ { print $c; exit }'
}
need() {
  [[ -n "$2" ]] || { echo "compare: no value for $1" >&2; exit 1; }
  echo "$2"
}

echo "== path $path: $rounds rounds; bandwidth $bw_iters x 64 KiB, latency $lat_iters x 2 B"
results="$work/results"
: >"$results"
for round in $(seq 1 "$rounds"); do
  # Alternate which goes first: the VM's fast and slow spells last minutes.
  if ((round % 2)); then order="braid ibv"; else order="ibv braid"; fi
  for who in $order; do
    if [[ "$who" == braid ]]; then
      out=$(run loopback.sh braid_write_bw -s 65536 -n "$bw_iters")
    else
      out=$(run ibverbs-loopback.sh ib_write_bw -s 65536 -n "$bw_iters")
    fi
    echo "bw_$who $(need "bw $who" "$(row_col 65536 4 <<<"$out")")" >>"$results"
  done
  for who in $order; do
    if [[ "$who" == braid ]]; then
      out=$(run loopback.sh braid_write_lat -s 2 -n "$lat_iters")
    else
      out=$(run ibverbs-loopback.sh ib_write_lat -s 2 -n "$lat_iters")
    fi
    echo "lat_$who $(need "lat $who" "$(row_col 2 5 <<<"$out")") $(row_col 2 6 <<<"$out")" >>"$results"
  done
  echo "round $round: $(tail -n 4 "$results" | tr '\n' ' ')"
done

python3 - "$path" "$results" "$rounds" <<'PY'
import statistics, sys
path, results, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = {}
for line in open(results):
    k, *v = line.split()
    rows.setdefault(k, []).append([float(x) for x in v])
med = statistics.median
def span(xs): return f"{100*min(xs):.0f}-{100*max(xs):.0f}%"
bb = [r[0] for r in rows["bw_braid"]]; bi = [r[0] for r in rows["bw_ibv"]]
q = [i / b for b, i in zip(bb, bi)]
lb = rows["lat_braid"]; li = rows["lat_ibv"]
qt = [i[0] / b[0] for b, i in zip(lb, li)]
qa = [i[1] / b[1] for b, i in zip(lb, li)]
print(f"\n| path {path} ({rounds} rounds, medians) | braid_* | ib_* over libibverbs.so.1 | ib/braid (range) | within 10% |")
print("|---|---|---|---|---|")
print(f"| write_bw 64 KiB, BW average (MB/s) | {med(bb):.0f} | {med(bi):.0f} | {100*med(q):.0f}% ({span(q)}) | {'yes' if abs(med(q)-1) <= 0.1 else 'no'} |")
print(f"| write_lat 2 B, t_typical (us) | {med([b[0] for b in lb]):.2f} | {med([i[0] for i in li]):.2f} | {100*med(qt):.0f}% ({span(qt)}) | {'yes' if abs(med(qt)-1) <= 0.1 else 'no'} |")
print(f"| write_lat 2 B, t_avg (us) | {med([b[1] for b in lb]):.2f} | {med([i[1] for i in li]):.2f} | {100*med(qa):.0f}% ({span(qa)}) | {'yes' if abs(med(qa)-1) <= 0.1 else 'no'} |")
PY

#!/usr/bin/env bash
# Goodput against the number of QPs: braid_write_bw -s SIZE -q Q -D SECONDS
# over a virtual NIC pair (scripts/loopback.sh), for each Q in turn, ROUNDS
# times; each Q's goodput as a ratio of the same round's 1-QP run. With
# OTHER_BUILD set (another build directory, e.g. of the commit before), each
# run is repeated with it right after, side by side. With SAME_MEMORY=1,
# each Q > 1 is followed by one QP whose buffers span as much memory as Q
# QPs' (--buffer-span), row "1 over Q": what the memory footprint alone costs.
# With PDC_PEER=1, each Q > 1 is followed by the same with one PDC for all
# its QPs (--pdc-scope peer), row "Q peer".
#   bench/qp_sweep.sh [memif|virtio]   (QPS="1 16 256 1024" SIZE=65536 SECONDS_PER_RUN=3 ROUNDS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-memif}"
qps="${QPS:-1 16 256 1024}"
size="${SIZE:-65536}"
secs="${SECONDS_PER_RUN:-3}"
rounds="${ROUNDS:-3}"
builds=("${BRAID_BUILD_DIR:-build/release}")
[[ -n "${OTHER_BUILD:-}" ]] && builds+=("$OTHER_BUILD")
results=$(mktemp /tmp/braid-qp-sweep.XXXXXX)
trap 'rm -f "$results"' EXIT
region=$(( (size + 4095) / 4096 * 4096 ))
cases=()
for q in $qps; do
  cases+=("$q:-q $q")
  if [[ "${PDC_PEER:-0}" == 1 && "$q" -gt 1 ]]; then
    cases+=("${q}_peer:-q $q --pdc-scope peer")
  fi
  if [[ "${SAME_MEMORY:-0}" == 1 && "$q" -gt 1 ]]; then
    cases+=("1_over_$q:-q 1 --buffer-span $(( q * region ))")
  fi
done
for round in $(seq 1 "$rounds"); do
  for c in "${cases[@]}"; do
    label="${c%%:*}"
    read -r -a args <<<"${c#*:}"
    for b in "${builds[@]}"; do
      out=$(BRAID_BUILD_DIR="$b" scripts/loopback.sh --path "$path" braid_write_bw -s "$size" "${args[@]}" -D "$secs" 2>&1) || {
        echo "qp_sweep: braid_write_bw ${args[*]} failed ($b):" >&2
        grep -v '^EAL\|^VHOST_CONFIG\|^TELEMETRY\|remote address\|local address\|GID:' <<<"$out" | tail -n 20 >&2
        exit 1
      }
      mib=$(awk -v s="$size" '$1 == s && $2 ~ /^[0-9]+$/ { print $4; exit }' <<<"$out")
      echo "$round $b $label $mib" | tee -a "$results"
    done
  done
done
python3 - "$results" "$size" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
size = sys.argv[2]
builds = list(dict.fromkeys(r[1] for r in rows))
qs = list(dict.fromkeys(r[2] for r in rows))
val = {(r[0], r[1], r[2]): float(r[3]) for r in rows}
rounds = sorted(set(r[0] for r in rows))
print(f"\n| QPs | " + " | ".join(f"{b}: MiB/s (median) | of 1 QP (median, range)" for b in builds) + " |")
print("|---|" + "---|---|" * len(builds))
for q in qs:
    cells = []
    for b in builds:
        v = [val[(r, b, q)] for r in rounds]
        ratio = [val[(r, b, q)] / val[(r, b, qs[0])] for r in rounds]
        cells += [f"{statistics.median(v):.0f}", f"{100*statistics.median(ratio):.0f}% ({100*min(ratio):.0f}-{100*max(ratio):.0f}%)"]
    print(f"| {q.replace('_', ' ')} | " + " | ".join(cells) + " |")
PY

#!/usr/bin/env bash
# What the authenticated mode costs (docs/security.md): Braid's perftest
# tools with --auth off and --auth on side by side in one run, alternating,
# ROUNDS times (default 3), over one virtual NIC path (memif by default).
# With OLD_BUILD_DIR set, an older build's tools run in each round as well
# (auth off only): the cost of the default path's own change.
#   bench/auth_cost.sh [memif|virtio]
# Needs a release build (cmake --build --preset release).
# Measures: 64 KiB WRITE goodput (braid_write_bw -s 65536 -n 20000, MiB/s),
# 64 B WRITE rate (braid_write_bw -s 64 -n 200000, Mpps), and latency
# (braid_write_lat -n 5000, t_typical us). Prints medians and the median of
# the per-round ratios on/off (with their range).
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-memif}"
rounds="${ROUNDS:-3}"
new="${BRAID_BUILD_DIR:-build/release}"
old="${OLD_BUILD_DIR:-}"
key=5a17e2c0ffee00112233445566778899aabbccddeeff00112233445566778899
work=$(mktemp -d /tmp/braid-auth-cost.XXXXXX)
trap 'rm -rf "$work"' EXIT
results="$work/results"

# run <build dir> <tool> <args...>: the tool's output (client and server).
run() {
  local dir="$1"
  shift
  BRAID_BUILD_DIR="$dir" scripts/loopback.sh --path "$path" "$@" >"$work/log" 2>&1 || {
    echo "auth_cost: $* failed:" >&2
    grep -v '^EAL\|^VHOST_CONFIG\|^TELEMETRY' "$work/log" | tail -n 30 >&2
    exit 1
  }
  cat "$work/log"
}
# First data row whose #bytes column is $1: column $2.
row_col() { awk -v s="$1" -v c="$2" '$1 == s && NF >= c && $2 ~ /^[0-9]+$/ { print $c; exit }'; }

measure() { # measure <label> <build dir> <extra args...>
  local label="$1" dir="$2"
  shift 2
  local bw rate lat
  bw=$(run "$dir" braid_write_bw -s 65536 -n 20000 "$@" | row_col 65536 4)
  rate=$(run "$dir" braid_write_bw -s 64 -n 200000 "$@" | row_col 64 5)
  lat=$(run "$dir" braid_write_lat -n 5000 "$@" | row_col 2 5)
  echo "$round $label $bw $rate $lat" | tee -a "$results"
}

echo "== path $path, $rounds rounds: round config MiB/s(64KiB) Mpps(64B) t_typical(us)"
for round in $(seq 1 "$rounds"); do
  [[ -n "$old" ]] && measure old "$old"
  measure off "$new"
  measure on "$new" --auth on --auth-key "$key"
done

python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for r, label, bw, rate, lat in rows:
    by.setdefault(label, {})[r] = (float(bw), float(rate), float(lat))
med = statistics.median
names = ["64 KiB WRITE goodput (MiB/s)", "64 B WRITE rate (Mpps)", "write_lat t_typical (us)"]
labels = [l for l in ("old", "off", "on") if l in by]
print("| measure | " + " | ".join(labels) + " | on / off (range) |")
print("|---" * (len(labels) + 2) + "|")
for i, name in enumerate(names):
    vals = [med(v[i] for v in by[l].values()) for l in labels]
    ratios = [by["on"][r][i] / by["off"][r][i] for r in by["off"] if r in by["on"]]
    print(f"| {name} | " + " | ".join(f"{v:.3g}" for v in vals) +
          f" | {med(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
if "old" in by:
    for i, name in enumerate(names):
        ratios = [by["off"][r][i] / by["old"][r][i] for r in by["old"] if r in by["off"]]
        print(f"off / old, {name}: {med(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})")
EOF

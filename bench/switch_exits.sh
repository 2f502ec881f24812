#!/usr/bin/env bash
# How often braid_switch survives its hosts' exits: RUNS runs (default 30)
# of 8 pairs through one core link, each ending with 16 memif hosts exiting
# while the switch polls; prints every failed run and the count.
#   bench/switch_exits.sh [RUNS]     (BRAID_BUILD_DIR picks the build)
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-30}
fails=0
for i in $(seq 1 "$runs"); do
  out=$(bash scripts/switch-fabric.sh --pairs 8 --links 1 --switch "--core-rate-mbps 1000" \
    braid_write_bw -s 65536 -D 1 2>&1)
  rc=$?
  if [[ $rc -ne 0 ]]; then
    fails=$((fails + 1))
    echo "run $i: exit $rc: $(grep -m2 -iE 'status|stopped before' <<<"$out" | tr '\n' ' ')"
  fi
done
echo "switch_exits: $fails of $runs runs failed"

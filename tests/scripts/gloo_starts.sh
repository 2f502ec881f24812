#!/usr/bin/env bash
# Gloo over Braid starts and tears down cleanly every time: N runs of two
# ranks (memif) that connect, run a small allreduce and a barrier with
# checked results, and exit 0.
#   tests/scripts/gloo_starts.sh <build dir> [runs, default 10]
set -euo pipefail
build="${1:?build dir}"
runs="${2:-10}"
cd "$(dirname "$0")/../.."
for ((i = 1; i <= runs; i++)); do
  if ! out=$(BRAID_BUILD_DIR="$build" timeout 120 scripts/gloo-ranks.sh --path memif \
      --algorithms allreduce_ring,barrier_all_to_all --max-bytes 1K --max-iters 5 2>&1); then
    echo "$out"
    echo "gloo_starts: run $i of $runs failed" >&2
    exit 1
  fi
  grep -q "all results checked" <<<"$out" || { echo "$out"; echo "gloo_starts: run $i: no result line" >&2; exit 1; }
done
echo "gloo_starts: $runs of $runs runs started, checked their results and tore down"

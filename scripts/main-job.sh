#!/usr/bin/env bash
# Braid's main job: builds the optimised tree and runs the perftest-style
# write-bandwidth benchmark between two Braid endpoints over a simulated lossy
# 4-path fabric, sprayed over 64 entropies and, for contrast, on one path.
# Extra arguments go to braid_sim_write_bw (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target braid_sim_write_bw
echo
echo "== Braid: per-packet spraying over 64 entropies =="
build/release/apps/braid_sim_write_bw --verify "$@"
echo
echo "== Baseline: the same connection pinned to one path (RoCEv2-like) =="
build/release/apps/braid_sim_write_bw --verify --entropies 1 "$@"

#!/usr/bin/env bash
# The simulated fabric: perftest-style RDMA WRITE bandwidth between two Braid
# endpoints over a lossy 4-path ECMP fabric in virtual time, sprayed over 64
# entropies and, for contrast, pinned to one path; then a 128-host fat tree
# (apps/braid_fabric, docs/fabric-results.md) with a 2 MB permutation.
# Arguments go to braid_sim_write_bw (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
source scripts/lib/build.sh
braid_build release braid_sim_write_bw braid_fabric
echo
echo "== Braid: per-packet spraying over 64 entropies =="
build/release/apps/braid_sim_write_bw --verify "$@"
echo
echo "== Baseline: the same connection pinned to one path (RoCEv2-like) =="
build/release/apps/braid_sim_write_bw --verify --entropies 1 "$@"
echo
echo "== A datacenter fabric: 128-host fat tree, 2 MB permutation (bench/fabric_scenarios.sh has the rest) =="
build/release/apps/braid_fabric --scenario permutation -s 2M

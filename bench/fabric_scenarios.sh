#!/usr/bin/env bash
# The fabric issue's scenarios at full scale with the UEC simulator's
# parameters (3-tier fat tree, 100 Gb/s, 1 us links, 4 KiB MTU, 1-BDP
# queues with trimming, ECN 20/80% of the BDP, 64 entropies), every profile
# side by side; tables on stdout, per-flow CSV and time series under
# $OUT (default /tmp/braid-fabric). docs/fabric-results.md records a run.
#   bench/fabric_scenarios.sh [scenario...]   (default: all)
# Needs a release build: cmake --build --preset release --target braid_fabric
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${BRAID_BUILD_DIR:-build/release}/apps/braid_fabric"
[[ -x "$bin" ]] || { echo "fabric_scenarios: $bin not built" >&2; exit 1; }
out="${OUT:-/tmp/braid-fabric}"
mkdir -p "$out"
run() {  # name, then braid_fabric arguments
  local name="$1"
  shift
  echo "== $name: braid_fabric $*"
  # A scenario where flows fail still reports: its exit status is noted.
  "$bin" "$@" --csv "$out/$name.csv" || echo "($name: some flows did not complete)"
  echo
}
want() { [[ $# -eq 0 ]] || [[ " $* " == *" $scenario "* ]]; }
scenarios=(perm2m perm16m incast loss degrade linkdown gray victim background allreduce k16 400g
           notrim)
for scenario in "${scenarios[@]}"; do
  want "$@" || continue
  case "$scenario" in
    perm2m) run perm2m --scenario permutation -s 2M ;;
    perm16m)
      run perm16m --scenario permutation -s 16M
      run single16m --scenario single -s 16M --profile braid ;;
    incast)
      # Without congestion control a 127:1 incast collapses: 100 ms of
      # virtual time say how far it gets.
      for n in 8 32 127; do
        run "incast$n" --scenario incast --incast "$n" -s 2M --timeseries "$out/incast$n.ts" \
          --sample-us 10 --time-limit-ms 100
      done ;;
    loss)
      for p in 0.01 0.1 1; do
        run "loss$p" --scenario permutation -s 16M --loss-pct "$p" --loss-where last-hop
      done ;;
    degrade) run degrade --scenario permutation -s 16M --degrade 4 --degrade-fraction 0.25 ;;
    linkdown)
      run linkdown --scenario permutation -s 16M --link-down-at-us 500 \
        --timeseries "$out/linkdown.ts" --sample-us 20 ;;
    gray)
      run gray --scenario permutation -s 16M --gray-at-us 500 \
        --timeseries "$out/gray.ts" --sample-us 20 \
        --entropy-series "$out/gray.es" --entropy-flows 0 1 2 3 ;;
    victim)
      run victim --scenario victim --incast 7 -s 2M --timeseries "$out/victim.ts" --sample-us 10
      run victim-alone --scenario victim-alone -s 2M ;;
    background)
      # Poisson arrivals of 2 MB flows between random hosts for 1 ms, with
      # the victim flow (127 -> 1) starting half way.
      for load in 0.5 0.8; do
        run "background$load" --scenario background --load "$load" -s 2M --duration-us 1000 \
          --timeseries "$out/background$load.ts" --sample-us 10
      done ;;
    allreduce)
      run allreduce --scenario allreduce -s 64M --time-limit-ms 20000
      run halving-doubling --scenario halving-doubling -s 64M --time-limit-ms 20000 ;;
    k16) run k16 --scenario permutation -k 16 -s 2M ;;
    400g) run 400g --scenario permutation -s 16M --gbps 400 ;;
    notrim) run notrim-incast8 --scenario incast --incast 8 -s 2M --no-trim ;;
  esac
done

#!/usr/bin/env bash
# Runs braid_gloo_bench (Gloo's collectives, unmodified) as N ranks on this
# host, over Braid through Braid's libibverbs.so.1, or over Gloo's TCP
# transport with the same arguments; the ranks meet in a FileStore.
#   scripts/gloo-ranks.sh [--path memif|virtio|switch|tcp] [--ranks 2] [bench arguments...]
# memif, virtio: 2 ranks joined by a DPDK virtual NIC pair, one core each.
# switch: N ranks on memif ports of braid_switch (Braid's software switch,
#   on core 0); the ranks share the two cores and yield them when idle.
# tcp: Gloo's TCP transport over loopback (the baseline).
# BRAID_IBV_MTU=9000 gives memif and virtio pairs jumbo frames.
# Rank 0's table on stdout; every rank's output kept when one fails. The
# program comes from $BRAID_BUILD_DIR (default build/release)/apps/gloo.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/ranks.sh
ranks_args "$@"
set -- ${ranks_rest[@]+"${ranks_rest[@]}"}
build_dir="$(realpath "${BRAID_BUILD_DIR:-build/release}")"
bin="$build_dir/apps/gloo/braid_gloo_bench"
lib="$build_dir/ibverbs"
[[ -x "$bin" ]] || { echo "gloo-ranks: $bin not built (apt-get install libgloo-dev)" >&2; exit 1; }

source scripts/lib/vnic-pair.sh
source scripts/lib/braid-ibverbs.sh
pair_run_dir braid-gloo
store="$run_dir/store"
mkdir -p "$store"
trap 'ranks_kill; rm -rf "$run_dir"' EXIT

common=(--size "$ranks" --store "$store" "$@")
if [[ "$path" == tcp ]]; then
  for ((r = ranks - 1; r >= 0; r--)); do
    taskset -c $((r % 2)) timeout 600 "$bin" --rank "$r" --transport tcp "${common[@]}" \
      >"$run_dir/rank$r.log" 2>&1 &
    rank_pids+=($!)
  done
else
  use_braid_ibverbs "$lib"
  ranks_start "$path" "$ranks" "$run_dir" "$bin" --transport ibverbs "${common[@]}"
fi
failed=0
ranks_wait || failed=1
ranks_report gloo-ranks "$run_dir" "$ranks" "$failed"

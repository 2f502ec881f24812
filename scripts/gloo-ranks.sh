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
path=memif
ranks=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --path) path="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    *) break ;;
  esac
done
build_dir="$(realpath "${BRAID_BUILD_DIR:-build/release}")"
bin="$build_dir/apps/gloo/braid_gloo_bench"
lib="$build_dir/ibverbs"
[[ -x "$bin" ]] || { echo "gloo-ranks: $bin not built (apt-get install libgloo-dev)" >&2; exit 1; }

source scripts/lib/vnic-pair.sh
source scripts/lib/braid-ibverbs.sh
pair_run_dir braid-gloo
store="$run_dir/store"
mkdir -p "$store"
pids=()
rank_pids=()
cleanup() {
  for p in "${rank_pids[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$run_dir"
}
trap cleanup EXIT

common=(--size "$ranks" --store "$store" "$@")
case "$path" in
  tcp)
    for ((r = ranks - 1; r >= 0; r--)); do
      taskset -c $((r % 2)) timeout 600 "$bin" --rank "$r" --transport tcp "${common[@]}" \
        >"$run_dir/rank$r.log" 2>&1 &
      pids+=($!)
    done ;;
  memif | virtio)
    [[ "$ranks" -eq 2 ]] || { echo "gloo-ranks: --path $path takes 2 ranks" >&2; exit 2; }
    vnic_pair "$path" "$run_dir" "${BRAID_IBV_MTU:-1500}"
    use_braid_ibverbs "$lib"
    export BRAID_IBV_LINK_WAIT_MS=60000
    BRAID_IBV_PORT="$server_port" BRAID_IBV_IP=198.18.0.1 BRAID_IBV_LCORE=0 \
      taskset -c 0 timeout 600 "$bin" --rank 0 --transport ibverbs "${common[@]}" \
      >"$run_dir/rank0.log" 2>&1 &
    pids+=($!)
    server_pid=${pids[0]}
    server_log="$run_dir/rank0.log"
    pair_server_ready gloo-ranks
    server_pid=
    BRAID_IBV_PORT="$client_port" BRAID_IBV_IP=198.18.0.2 BRAID_IBV_LCORE=1 \
      taskset -c 1 timeout 600 "$bin" --rank 1 --transport ibverbs "${common[@]}" \
      >"$run_dir/rank1.log" 2>&1 &
    pids+=($!) ;;
  switch)
    switch_bin="$build_dir/apps/braid_switch"
    [[ -x "$switch_bin" ]] || { echo "gloo-ranks: $switch_bin not built" >&2; exit 1; }
    ports=()
    for ((r = 0; r < ranks; r++)); do
      ports+=(--port "net_memif$r,role=server,id=0,socket=$run_dir/p$r.sock,socket-abstract=no")
    done
    "$switch_bin" --lcore 0 --idle-yield 16 --links 1 "${ports[@]}" >"$run_dir/switch.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 400); do
      grep -q "ready" "$run_dir/switch.log" 2>/dev/null && break
      sleep 0.05
    done
    grep -q "ready" "$run_dir/switch.log" || { echo "gloo-ranks: the switch did not start" >&2; cat "$run_dir/switch.log" >&2; exit 1; }
    use_braid_ibverbs "$lib"
    export BRAID_IBV_LINK_WAIT_MS=60000 BRAID_IBV_IDLE_YIELD=16
    for ((r = 0; r < ranks; r++)); do
      port=$(printf "net_memif0,role=client,id=0,socket=%s/p%d.sock,socket-abstract=no,mac=02:00:c6:12:00:%02x" \
        "$run_dir" "$r" $((r + 1)))
      BRAID_IBV_PORT="$port" BRAID_IBV_IP="198.18.0.$((r + 1))" BRAID_IBV_LCORE=$(((r + 1) % 2)) \
        taskset -c $(((r + 1) % 2)) timeout 600 "$bin" --rank "$r" --transport ibverbs "${common[@]}" \
        >"$run_dir/rank$r.log" 2>&1 &
      rank_pids+=($!)
    done ;;
  *) echo "gloo-ranks: unknown path '$path' (memif, virtio, switch or tcp)" >&2; exit 2 ;;
esac

failed=0
if [[ "$path" == switch ]]; then
  for p in "${rank_pids[@]}"; do wait "$p" || failed=1; done
  kill -INT "${pids[0]}" 2>/dev/null || true
  wait "${pids[0]}" || true
else
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
fi
pids=()
cat "$run_dir/rank0.log"
if [[ $failed -ne 0 ]]; then
  for ((r = 1; r < ranks; r++)); do
    echo "---- rank $r ----"
    cat "$run_dir/rank$r.log"
  done
  echo "gloo-ranks: a rank failed" >&2
  exit 1
fi

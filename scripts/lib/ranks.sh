# Starts N ranks of a program over Braid on this host (source it; bash).
# Shared by gloo-ranks.sh and nccl-ranks.sh.
#
# ranks_start <path> <ranks> <run dir> <program> [arguments...]
#   memif, virtio: 2 ranks joined by a DPDK virtual NIC pair, one core each
#     (BRAID_IBV_MTU=9000 gives them jumbo frames).
#   switch: N ranks on memif ports of braid_switch (Braid's software switch,
#     on core 0); the ranks share the two cores and yield them when idle.
# Each rank runs "<program> [arguments...] --rank R" with BRAID_IBV_PORT,
# BRAID_IBV_IP and BRAID_IBV_LCORE naming its port, output in
# <run dir>/rank<R>.log. Sets infra_pids (the switch) and rank_pids.
# ranks_wait: waits for the ranks (then stops the switch); 1 if one failed.
# ranks_args "$@": takes --path (default memif) and --ranks (default 2) off
#   the front of the arguments into $path and $ranks; the rest in ranks_rest.
# ranks_report <name> <run dir> <ranks> <failed>: rank 0's output; when a
#   rank failed, every other rank's too, and exit 1.
# Needs scripts/lib/vnic-pair.sh sourced and $build_dir set.
source "$(dirname "${BASH_SOURCE[0]}")/soft-switch.sh"
infra_pids=()
rank_pids=()
ranks_rest=()

ranks_args() {
  path=memif
  ranks=2
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --path) path="$2"; shift 2 ;;
      --ranks) ranks="$2"; shift 2 ;;
      *) break ;;
    esac
  done
  ranks_rest=("$@")
}

ranks_report() {
  local name="$1" dir="$2" n="$3" failed="$4" r
  cat "$dir/rank0.log"
  [[ "$failed" -eq 0 ]] && return 0
  for ((r = 1; r < n; r++)); do
    echo "---- rank $r ----"
    cat "$dir/rank$r.log"
  done
  echo "$name: a rank failed" >&2
  exit 1
}

ranks_start() {
  local path="$1" ranks="$2" dir="$3"
  shift 3
  export BRAID_IBV_LINK_WAIT_MS=60000
  case "$path" in
    memif | virtio)
      [[ "$ranks" -eq 2 ]] || { echo "ranks: --path $path takes 2 ranks" >&2; return 2; }
      vnic_pair "$path" "$dir" "${BRAID_IBV_MTU:-1500}"
      BRAID_IBV_PORT="$server_port" BRAID_IBV_IP=198.18.0.1 BRAID_IBV_LCORE=0 \
        taskset -c 0 timeout 600 "$@" --rank 0 >"$dir/rank0.log" 2>&1 &
      rank_pids+=($!)
      server_pid=${rank_pids[0]}
      server_log="$dir/rank0.log"
      pair_server_ready ranks
      server_pid=
      BRAID_IBV_PORT="$client_port" BRAID_IBV_IP=198.18.0.2 BRAID_IBV_LCORE=1 \
        taskset -c 1 timeout 600 "$@" --rank 1 >"$dir/rank1.log" 2>&1 &
      rank_pids+=($!) ;;
    switch)
      local r
      # RANKS_SWITCH_ARGS: more arguments for the switch (a core link's rate,
      # ECN), e.g. "--core-rate-mbps 300 --core-ecn 3000,30000,1".
      # shellcheck disable=SC2086
      switch_up "$build_dir" "$dir" "$ranks" "" ${RANKS_SWITCH_ARGS:-} || return 1
      infra_pids+=("$switch_pid")
      export BRAID_IBV_IDLE_YIELD=16
      for ((r = 0; r < ranks; r++)); do
        BRAID_IBV_PORT="${switch_ports[r]}" BRAID_IBV_IP="198.18.0.$((r + 1))" BRAID_IBV_LCORE=$(((r + 1) % 2)) \
          taskset -c $(((r + 1) % 2)) timeout 600 "$@" --rank "$r" >"$dir/rank$r.log" 2>&1 &
        rank_pids+=($!)
      done ;;
    *) echo "ranks: unknown path '$path' (memif, virtio or switch)" >&2; return 2 ;;
  esac
}

ranks_wait() {
  local failed=0 p
  for p in "${rank_pids[@]}"; do wait "$p" || failed=1; done
  rank_pids=()
  for p in "${infra_pids[@]}"; do
    kill -INT "$p" 2>/dev/null || true
    wait "$p" || true
  done
  infra_pids=()
  return $failed
}

ranks_kill() {
  local p
  for p in "${rank_pids[@]}" "${infra_pids[@]}"; do kill "$p" 2>/dev/null || true; done
}

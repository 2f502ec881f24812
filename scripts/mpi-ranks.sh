#!/usr/bin/env bash
# Runs an MPI program (default braid_mpi_allreduce) under Debian's Open MPI
# mpirun on this host, its ranks talking over Braid: pml ucx with UCX's
# rc_verbs and ud_verbs transports on Braid's libibverbs.so.1, each rank
# with its own Braid device on a vNIC. --pml ob1 runs the same program over
# Open MPI's TCP (btl tcp,self on loopback), the baseline.
#   scripts/mpi-ranks.sh [--path memif|virtio|switch] [--ranks 2] [--pml ucx|ob1]
#                        [--mtu 1500|9000] [--kill-rank R] [program arguments...]
# memif and virtio take 2 ranks; switch takes any number (braid_switch on
# core 0, the ranks share the cores). --mtu 9000 gives Braid's devices
# jumbo frames (the kernel's loopback, which TCP uses, has 65536). --kill-rank kills one rank with
# SIGKILL S seconds in: the run must then end with an error, not hang.
# Built programs from $BRAID_BUILD_DIR (default build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/vnic-pair.sh
source scripts/lib/braid-ibverbs.sh
source scripts/lib/ucx-device.sh
source scripts/lib/soft-switch.sh
path=memif
ranks=2
pml=ucx
kill_rank=
mtu=1500
while [[ $# -gt 0 ]]; do
  case "$1" in
    --path) path="$2"; shift 2 ;;
    --ranks) ranks="$2"; shift 2 ;;
    --pml) pml="$2"; shift 2 ;;
    --mtu) mtu="$2"; shift 2 ;;
    --kill-rank) kill_rank="$2"; shift 2 ;;
    *) break ;;
  esac
done
command -v mpirun >/dev/null || {
  echo "mpi-ranks: mpirun not found (apt-get install openmpi-bin)" >&2
  exit 1
}
build_dir="$(realpath "${BRAID_BUILD_DIR:-build/release}")"
bin="$build_dir/apps/mpi/braid_mpi_allreduce"
[[ -x "$bin" ]] || { echo "mpi-ranks: $bin not built" >&2; exit 1; }

pair_run_dir braid-mpi
infra_pids=()
mpirun_pid=
cleanup() {
  [[ -n "$mpirun_pid" ]] && kill "$mpirun_pid" 2>/dev/null
  local p
  for p in "${infra_pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  for p in "${infra_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ucx_device_node_down
  rm -rf "$run_dir"
}
trap cleanup EXIT

# Open MPI as root needs its consent; the ranks pin themselves (below).
mpi_args=(--allow-run-as-root --oversubscribe --bind-to none -np "$ranks")
case "$pml" in
  ob1)
    mpi_args+=(--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo)
    ports=() ;;
  ucx)
    use_braid_ibverbs "$build_dir/ibverbs" || exit 1
    ucx_device_node_up braid0 || exit 1
    # Only Braid between ranks: no shared memory, no TCP.
    mpi_args+=(--mca pml ucx --mca btl self --mca osc ucx
               -x UCX_TLS=self,rc_verbs,ud_verbs -x UCX_NET_DEVICES=braid0:1
               -x LD_LIBRARY_PATH -x BRAID_IBV_LINK_WAIT_MS=60000 -x BRAID_IBV_MTU="$mtu")
    [[ -n "${LD_PRELOAD:-}" ]] && mpi_args+=(-x LD_PRELOAD -x ASAN_OPTIONS)
    ports=()
    case "$path" in
      memif | virtio)
        [[ "$ranks" -eq 2 ]] || { echo "mpi-ranks: --path $path takes 2 ranks" >&2; exit 2; }
        vnic_pair "$path" "$run_dir" "$mtu" 1
        # mpirun starts the ranks together: virtio-user listens and the
        # vhost side connects (and retries until it is there).
        if [[ $path == virtio ]]; then
          server_port+=",client=1" client_port+=",server=1"
        fi
        ports=("$server_port" "$client_port") ;;
      switch)
        # The switch carries the ranks' frames: their MTU, and memif
        # buffers that hold a jumbo frame whole.
        bsize=
        [[ "$mtu" -gt 1500 ]] && bsize=",bsize=10240"
        switch_up "$build_dir" "$run_dir" "$ranks" "$bsize" --mtu "$mtu" || exit 1
        infra_pids+=("$switch_pid")
        ports=("${switch_ports[@]}")
        mpi_args+=(-x BRAID_IBV_IDLE_YIELD=16) ;;
      *) echo "mpi-ranks: unknown path '$path' (memif, virtio or switch)" >&2; exit 2 ;;
    esac ;;
  *) echo "mpi-ranks: unknown pml '$pml' (ucx or ob1)" >&2; exit 2 ;;
esac

# Each rank's device: the port list in the environment, one per line; the
# wrapper picks its own by OMPI_COMM_WORLD_RANK (and pins the rank).
BRAID_MPI_PORTS="$(printf '%s\n' ${ports[@]+"${ports[@]}"})"
export BRAID_MPI_PORTS BRAID_MPI_PID_DIR="$run_dir"
mpi_args+=(-x BRAID_MPI_PORTS -x BRAID_MPI_PID_DIR)
# MPIRUN_ARGS: more mpirun arguments (e.g. --enable-recovery).
# shellcheck disable=SC2206
mpi_args+=(${MPIRUN_ARGS:-})
set +e
timeout 600 mpirun "${mpi_args[@]}" scripts/lib/mpi-rank.sh "$bin" "$@" >"$run_dir/mpirun.log" 2>&1 &
mpirun_pid=$!
if [[ -n "$kill_rank" ]]; then
  # Once rank 0 has printed a result row (the ranks are talking); the
  # rank's pid is what its wrapper wrote.
  while ! grep -qE '^ +[0-9]+ +[0-9]+ ' "$run_dir/mpirun.log" 2>/dev/null; do
    kill -0 "$mpirun_pid" 2>/dev/null || break
    sleep 0.05
  done
  victim=$(cat "$run_dir/rank$kill_rank.pid" 2>/dev/null || true)
  if [[ -n "$victim" ]] && kill -KILL "$victim" 2>/dev/null; then
    echo "mpi-ranks: killed rank $kill_rank (pid $victim)"
  else
    echo "mpi-ranks: rank $kill_rank was not running to be killed" >&2
  fi
fi
wait "$mpirun_pid"
rc=$?
mpirun_pid=
set -e
cat "$run_dir/mpirun.log"
exit $rc

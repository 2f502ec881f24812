#!/usr/bin/env bash
# One MPI rank of scripts/mpi-ranks.sh: takes its Braid port from the list in
# BRAID_MPI_PORTS (line OMPI_COMM_WORLD_RANK + 1), its address 198.18.0.(rank+1),
# and one of the two cores, then runs the program.
#   mpi-rank.sh <program> [arguments...]
set -euo pipefail
rank="${OMPI_COMM_WORLD_RANK:?not started by Open MPI mpirun}"
if [[ -n "${BRAID_MPI_PORTS:-}" ]]; then
  BRAID_IBV_PORT="$(sed -n "$((rank + 1))p" <<<"$BRAID_MPI_PORTS")"
  [[ -n "$BRAID_IBV_PORT" ]] || { echo "mpi-rank: no port for rank $rank" >&2; exit 1; }
  export BRAID_IBV_PORT BRAID_IBV_IP="198.18.0.$((rank + 1))" BRAID_IBV_LCORE=$((rank % 2))
fi
# The rank's pid (exec keeps it) for scripts/mpi-ranks.sh --kill-rank.
[[ -n "${BRAID_MPI_PID_DIR:-}" ]] && echo $$ >"$BRAID_MPI_PID_DIR/rank$rank.pid"
exec taskset -c $((rank % 2)) "$@"

#!/usr/bin/env bash
# Open MPI's MPI_Allreduce (apps/mpi/braid_mpi_allreduce, every result
# checked) with pml ucx over Braid beside pml ob1 with btl tcp on loopback,
# alternated in one run:
#   bench/mpi_vs_tcp.sh [memif|virtio] [mtu]
# Time per call (us) at 8 B and from 64 KiB to 4 MiB, ROUNDS (default 3)
# alternated rounds; each cell lists every round. 2 ranks, one per core.
# UCX_TUNED="VAR=value ..." adds a third column: pml ucx over Braid with
# those UCX variables (e.g. UCX_RNDV_SEND_NBR_THRESH=32K), in the same rounds.
# Needs a release build, openmpi-bin and ucx-utils; runs as root.
set -euo pipefail
cd "$(dirname "$0")/.."
path="${1:-memif}"
mtu="${2:-9000}"
rounds="${ROUNDS:-3}"
work=$(mktemp -d /tmp/braid-mpi-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
sizes=(8 65536 262144 1048576 4194304)

tuned=()
for v in ${UCX_TUNED:-}; do tuned+=(-x "$v"); done
runs=(ucx ob1)
[[ ${#tuned[@]} -gt 0 ]] && runs+=(tuned)
declare -A cell
for ((r = 1; r <= rounds; ++r)); do
  for run in "${runs[@]}"; do
    pml=$run extra=()
    [[ $run == tuned ]] && pml=ucx extra=("${tuned[@]}")
    if ! MPIRUN_ARGS="${extra[*]}" scripts/mpi-ranks.sh --path "$path" --mtu "$mtu" --pml "$pml" \
      --max-bytes 4M >"$work/log" 2>&1; then
      echo "mpi_vs_tcp: $run failed:" >&2
      tail -n 30 "$work/log" >&2
      exit 1
    fi
    for s in "${sizes[@]}"; do
      cell[$run,$s]+="$(awk -v s="$s" '$1 == s {print $3}' "$work/log") "
    done
  done
done
head="| MPI_Allreduce, 2 ranks ($path, MTU $mtu, $rounds rounds), us per call | Braid: pml ucx (rc_verbs,ud_verbs) | pml ob1, btl tcp (loopback) |"
rule='|---|---|---|'
[[ ${#tuned[@]} -gt 0 ]] && head+=" Braid, $UCX_TUNED |" rule+='---|'
echo "$head"
echo "$rule"
for s in "${sizes[@]}"; do
  row="| $s B | ${cell[ucx,$s]}| ${cell[ob1,$s]}|"
  [[ ${#tuned[@]} -gt 0 ]] && row+=" ${cell[tuned,$s]}|"
  echo "$row"
done

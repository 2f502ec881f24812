#!/usr/bin/env bash
# Open MPI over Braid (pml ucx) with one of two ranks killed mid-run: the
# job must end with an error, not hang, and rank 0 must not finish as if
# nothing had happened.
#   tests/scripts/mpi_dead_peer.sh <build dir>
# (With mpirun --enable-recovery the survivor is left to meet the dead peer
# itself: one with sends in flight gets Braid's RC retries running out,
# "transport retry counter exceeded", after about 10 s; one only waiting to
# receive waits on, as over an RC NIC: Open MPI's pml ucx asks UCX for no
# peer failure detection. So that mode is not what this test checks.)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(BRAID_BUILD_DIR="$1" timeout 120 scripts/mpi-ranks.sh \
  --kill-rank 1 --max-bytes 4M --budget-bytes 64G --max-iters 20000 2>&1)
rc=$?
echo "$out" | grep -v '^\[[^]]*\] *\[ *[0-9]* *\]' | tail -n 20
if [[ $rc -eq 124 ]]; then
  echo "mpi_dead_peer: the job hung (stopped by timeout)" >&2
  exit 1
fi
grep -q "killed rank 1" <<<"$out" || { echo "mpi_dead_peer: rank 1 was never killed" >&2; exit 1; }
if grep -q "elements correct" <<<"$out"; then
  echo "mpi_dead_peer: rank 0 finished as if nothing had happened" >&2
  exit 1
fi
if [[ $rc -eq 0 ]]; then
  echo "mpi_dead_peer: the job exited 0 with a rank killed" >&2
  exit 1
fi
echo "mpi_dead_peer: the job ended with an error ($rc) once rank 1 died"

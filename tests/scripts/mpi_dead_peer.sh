#!/usr/bin/env bash
# Open MPI over Braid (pml ucx) with one of two ranks killed mid-run: with
# --enable-recovery mpirun leaves the other rank running, so it meets the
# dead peer itself. It must see it as an error (Braid's RC retries run out:
# UCX's "transport retry counter exceeded", and the rank aborts) and the job
# must end, not hang. (mpirun with --enable-recovery exits 0 even so: the
# rank's own report is what is checked.)
#   tests/scripts/mpi_dead_peer.sh <build dir>
set -uo pipefail
cd "$(dirname "$0")/../.."
out=$(BRAID_BUILD_DIR="$1" MPIRUN_ARGS=--enable-recovery timeout 120 scripts/mpi-ranks.sh \
  --kill-rank 1 --max-bytes 4M --budget-bytes 64G --max-iters 20000 2>&1)
rc=$?
echo "$out" | grep -v '^\[[^]]*\] *\[ *[0-9]* *\]' | tail -n 40
if grep -q "elements correct" <<<"$out"; then
  echo "mpi_dead_peer: rank 0 finished as if nothing had happened" >&2
  exit 1
fi
if [[ $rc -eq 124 ]]; then
  echo "mpi_dead_peer: the job hung (stopped by timeout)" >&2
  exit 1
fi
grep -q "killed rank 1" <<<"$out" || { echo "mpi_dead_peer: rank 1 was never killed" >&2; exit 1; }
grep -q "transport retry counter exceeded" <<<"$out" || {
  echo "mpi_dead_peer: rank 0 did not report the dead peer as a transport error" >&2
  exit 1
}
echo "mpi_dead_peer: rank 0 saw the dead peer as an error; job exited $rc"

#!/usr/bin/env bash
# rdma-core's own test suite (Debian's python3-pyverbs ships it in
# /usr/share/doc/rdma-core/tests), unmodified, over Braid's libibverbs.so.1
# on one DPDK port: a net_ring port by default, whose RX and TX share rings,
# so QPs of the device talk to each other as on one NIC. The tests are
# copied and unpacked (the package gzips some); tests/rdma-core/run_suite.py
# runs them and checks the skips against tests/rdma-core/expected-skips.txt.
#   tests/scripts/rdma_core_suite.sh <build dir> [DPDK port, default net_ring0]
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
lib="$(realpath "${1:?build dir}")/ibverbs"
port="${2:-net_ring0}"
src=/usr/share/doc/rdma-core/tests
python=/usr/bin/python3  # Debian's, where python3-pyverbs installs pyverbs
[[ -d "$src" ]] && "$python" -c 'import pyverbs' 2>/dev/null || {
  echo "rdma_core_suite: rdma-core's tests or pyverbs missing (apt-get install python3-pyverbs)" >&2
  exit 1
}
[[ -e "$lib/libibverbs.so.1" ]] || { echo "rdma_core_suite: $lib/libibverbs.so.1 not built" >&2; exit 1; }
work="$(mktemp -d /tmp/braid-rdma-core-tests.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp -r "$src" "$work/tests"
gunzip -f "$work"/tests/*.gz
export LD_LIBRARY_PATH="$lib"
if readelf -d "$lib/libibverbs.so.1" | grep -q libasan; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  # Python's own allocations are not ours to judge.
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
export BRAID_IBV_PORT="$port" BRAID_IBV_IP=198.18.0.1 BRAID_IBV_LINK_WAIT_MS=2000
unset BRAID_IBV_CONFIG BRAID_IBV_NEIGHBORS
cd "$work"
exec "$python" "$here/tests/rdma-core/run_suite.py" "$work/tests" \
  "$here/tests/rdma-core/expected-skips.txt" --dev braid0

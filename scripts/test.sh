#!/usr/bin/env bash
# Braid's tests: the wire decoder's libFuzzer target for a bounded time, then
# unit, integration and property tests under ASan/UBSan (ctest), and the
# multi-threaded tests under ThreadSanitizer.
# Usage (as root on a fresh machine): scripts/test.sh [fuzz seconds, default 60]
set -euo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds="${1:-60}"
scripts/install-deps.sh --fuzz
if [[ "$fuzz_seconds" != 0 ]]; then
  scripts/run-fuzz.sh "$fuzz_seconds" 2>&1 | tail -n 12
fi
source scripts/lib/build.sh
braid_build asan
ctest --preset asan -j2
# The multi-threaded tests again under ThreadSanitizer (only their targets).
braid_build tsan
ctest --preset tsan

#!/usr/bin/env bash
# Builds the wire decoder's libFuzzer target (clang-14, 'fuzz' preset) and runs
# it over the seed corpus for a bounded time. Exits non-zero if it finds a
# crash, a sanitizer report or a re-encode mismatch.
# Usage: scripts/run-fuzz.sh [seconds, default 60]
#
# The checked-in seeds (tests/fuzz/corpus) are only read: inputs the fuzzer
# finds go to build/fuzz/corpus, and a failing input is saved under
# build/fuzz/artifacts/ (reproduce with: braid_decode_fuzz <that file>).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 [seconds]" >&2
  exit 2
fi
source scripts/lib/build.sh
braid_build fuzz braid_decode_fuzz
mkdir -p build/fuzz/corpus build/fuzz/artifacts
exec ./build/fuzz/tests/fuzz/braid_decode_fuzz -max_total_time="$seconds" \
  -artifact_prefix=build/fuzz/artifacts/ -print_final_stats=1 \
  build/fuzz/corpus tests/fuzz/corpus

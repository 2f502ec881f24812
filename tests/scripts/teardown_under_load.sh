#!/usr/bin/env bash
# Teardowns under load: with a busy loop on each core (a slow spell: the
# scheduler descheduling a process in the middle of a burst), runs
#   ib_send_bw -e -n 300 over Braid's libibverbs.so.1 (memif), and
#   two Gloo ranks that connect, reduce, meet at a barrier and exit (memif),
# N times each, counting runs that fail and runs that crash (a signal, or
# a sanitizer's report). Every run must end cleanly.
#   tests/scripts/teardown_under_load.sh <build dir> [runs, default 300] [gloo runs, default runs / 3]
set -uo pipefail
cd "$(dirname "$0")/../.."
build="$(realpath "${1:?build dir}")"
runs="${2:-300}"
gloo_runs="${3:-$((runs / 3))}"
busy=()
stop_busy() {
  for p in "${busy[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap stop_busy EXIT
trap 'exit 143' TERM INT
for core in 0 1; do
  # Bounded: a runner that kills this script (a timeout) leaves no spinner.
  taskset -c "$core" timeout 1800 bash -c 'while :; do :; done' &
  busy+=($!)
done
failed=0 crashed=0
# A crash shows as a signal's exit status (128 + n) or a fault report.
crash_in() {
  grep -qE "Segmentation fault|SIGSEGV|SIGABRT|Aborted|AddressSanitizer|core dumped|(exited|server|rank [0-9]+) 1(3[4-9]|4[0-3])([^0-9]|$)" "$1"
}
run() {
  local what="$1" i="$2" log
  shift 2
  log=$(mktemp /tmp/braid-teardown.XXXXXX)
  if ! "$@" >"$log" 2>&1; then
    failed=$((failed + 1))
    if crash_in "$log"; then crashed=$((crashed + 1)); fi
    echo "teardown_under_load: $what run $i failed:" >&2
    grep -iE "exited|fault|signal|abort|error|fail|sanitizer" "$log" | grep -v '^EAL:' | tail -n 12 >&2
  fi
  rm -f "$log"
}
for ((i = 1; i <= runs; i++)); do
  run ib_send_bw "$i" env BRAID_BUILD_DIR="$build" scripts/ibverbs-loopback.sh ib_send_bw -e -n 300
done
echo "teardown_under_load: ib_send_bw -e: $runs runs done"
if [[ -x "$build/apps/gloo/braid_gloo_bench" ]]; then
  for ((i = 1; i <= gloo_runs; i++)); do
    run gloo "$i" env BRAID_BUILD_DIR="$build" timeout 120 scripts/gloo-ranks.sh --path memif \
      --algorithms allreduce_ring,barrier_all_to_all --max-bytes 1K --max-iters 5
  done
  echo "teardown_under_load: gloo: $gloo_runs runs done"
fi
if [[ $failed -ne 0 ]]; then
  echo "teardown_under_load: $failed runs failed, $crashed of them crashed" >&2
  exit 1
fi
echo "teardown_under_load: every run ended cleanly ($runs ib_send_bw -e, $gloo_runs gloo)"

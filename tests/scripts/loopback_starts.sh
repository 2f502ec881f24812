#!/usr/bin/env bash
# Loopback starts, again and again: an unmodified verbs program's server and
# client over Braid's libibverbs.so.1 joined by memif, then by vhost-user <->
# virtio-user, each run a fresh pair of processes. Every start must work.
#   tests/scripts/loopback_starts.sh <build dir> [runs per path, default 100]
set -uo pipefail
cd "$(dirname "$0")/../.."
build="$(realpath "${1:?build dir}")"
runs="${2:-100}"
failed=0
for path in memif virtio; do
  for i in $(seq 1 "$runs"); do
    log=$(mktemp /tmp/braid-starts.XXXXXX)
    if ! BRAID_BUILD_DIR="$build" scripts/ibverbs-loopback.sh --path "$path" \
      ibv_rc_pingpong -g 0 -n 5 >"$log" 2>&1; then
      failed=$((failed + 1))
      echo "loopback_starts: $path start $i failed:" >&2
      grep -v '^EAL:\|^VHOST_CONFIG' "$log" | tail -n 30 >&2
    fi
    rm -f "$log"
  done
  echo "loopback_starts: $path: $runs starts done"
done
if [[ $failed -ne 0 ]]; then
  echo "loopback_starts: $failed of $((2 * runs)) starts failed" >&2
  exit 1
fi
echo "loopback_starts: all $((2 * runs)) starts worked"

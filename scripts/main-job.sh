#!/usr/bin/env bash
# Braid's main job: builds the optimised tree, then runs braid_write_bw and
# braid_write_lat between two processes on this host, one core each, joined
# by vhost-user <-> virtio-user (DPDK virtual NICs, no hugepages needed).
# Extra arguments go to both tools (perftest flags, e.g. -s 4096 or -a).
#   BRAID_PATH=memif scripts/main-job.sh     # the same over memif
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
source scripts/lib/build.sh
braid_build release braid_write_bw braid_write_lat
path="${BRAID_PATH:-virtio}"
echo
echo "== braid_write_bw over $path (client output, then the server's) =="
scripts/loopback.sh --path "$path" braid_write_bw "$@"
echo
echo "== braid_write_lat over $path =="
scripts/loopback.sh --path "$path" braid_write_lat "$@"

#!/usr/bin/env bash
# Instructions per data packet of the protocol core (both ends, ACKs
# included): BM_CoreTransfer 64 B under callgrind. Unlike the benchmark's
# time, the count does not move with the VM's spells, so a change to the
# core can be judged in one run.
#
# Counted: everything the benchmark loop calls on the two endpoints
# (Endpoint::transmit, receive, advance), divided by the data packets
# carried (calls of Connection::on_data_packet, bench/callgrind_count.py).
# Not counted: setting up the pair (constructors, destructors: spread over
# however many packets a run makes, they moved the count by up to 50),
# posting the message (once per 64 packets).
#
# Usage: bench/core_instructions.sh [braid_core_bench ...]
#   default: build/release/bench/braid_core_bench; several binaries (an old
#   and a new build) are counted one after the other.
# Needs valgrind (Debian package valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("$@")
[[ ${#bins[@]} -eq 0 ]] && bins=(build/release/bench/braid_core_bench)
filter="${FILTER:-BM_CoreTransfer/payload:64/entropies:64/idle:0}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for b in "${bins[@]}"; do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    --toggle-collect='braid::(anonymous namespace)::BM_CoreTransfer*' \
    "$b" --benchmark_filter="$filter\$" --benchmark_min_time=0.05 >/dev/null 2>&1
  python3 bench/callgrind_count.py endpoint "$out/cg" "$b"
done

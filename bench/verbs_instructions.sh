#!/usr/bin/env bash
# Instructions per 64 B WRITE along the whole verbs path, both ends on one
# thread over an in-memory cable (BM_VerbsWrite in bench/verbs_bench.cc),
# under callgrind, grouped by layer. The count does not move with the VM's
# spells, unlike time.
#
# Groups, by the function the instructions are in (after inlining: the
# verbs calls are inlined into the benchmark's loop, write_step):
#   verbs   write_step (braid_post_send, braid_poll_cq, braid_progress and
#           the loop around them)
#   engine  Engine::* (the poll loop, transmit, steering)
#   core    every other braid:: function (the protocol core, both ends)
#   cable   the in-memory PacketIo (what a PMD does instead)
#   libc    memcpy and friends
# Divided by the data packets carried (the receiver's calls of
# Connection::on_data_packet, bench/callgrind_count.py): one per 64 B WRITE.
#
# Usage: bench/verbs_instructions.sh [braid_verbs_bench ...]
#   ENGINES=2 counts the device with two engines (both polled by the thread).
#   SIZE=65536 counts 64 KiB WRITEs (MTU 1024: per data packet of bulk
#   data), and READ=1 READs of SIZE instead (per READ response packet, the
#   READ requests' few packets included).
# Needs valgrind (Debian package valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("$@")
[[ ${#bins[@]} -eq 0 ]] && bins=(build/release/bench/braid_verbs_bench)
engines="${ENGINES:-1}"
size="${SIZE:-64}"
read="${READ:-0}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for b in "${bins[@]}"; do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    --toggle-collect='braid::(anonymous namespace)::write_step*' \
    "$b" --benchmark_filter="BM_VerbsWrite/size:$size/engines:$engines(/read:$read)?\$" \
    --benchmark_min_time=0.2 >/dev/null 2>&1
  python3 bench/callgrind_count.py layers "$out/cg" "$b (engines $engines, $size B, read $read)"
done

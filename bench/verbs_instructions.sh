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
# Divided by the data packets built (Connection::produce_new calls): one
# per 64 B WRITE.
#
# Usage: bench/verbs_instructions.sh [braid_verbs_bench ...]
#   ENGINES=2 counts the device with two engines (both polled by the thread).
# Needs valgrind (Debian package valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("$@")
[[ ${#bins[@]} -eq 0 ]] && bins=(build/release/bench/braid_verbs_bench)
engines="${ENGINES:-1}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for b in "${bins[@]}"; do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg" \
    --toggle-collect='braid::(anonymous namespace)::write_step*' \
    "$b" --benchmark_filter="BM_VerbsWrite/size:64/engines:$engines\$" \
    --benchmark_min_time=0.2 >/dev/null 2>&1
  python3 - "$out/cg" "$b" "$engines" <<'PY'
import re, sys
names, fn, cfn = {}, '', ''
def name(tok):
    m = re.match(r'\((\d+)\)(?: (.*))?', tok)
    if not m:
        return tok
    if m.group(2):
        names[m.group(1)] = m.group(2)
    return names.get(m.group(1), '')
groups = {'verbs': 0, 'engine': 0, 'core': 0, 'cable': 0, 'libc': 0, 'other': 0}
packets = 0
skip_cost = False
def group(f):
    if 'write_step' in f: return 'verbs'
    if 'MemIo::' in f: return 'cable'
    if 'Engine::' in f: return 'engine'
    if 'braid' in f: return 'core'
    if re.search(r'mem(cpy|move|set)|__tls_get_addr', f): return 'libc'
    return 'other'
for line in open(sys.argv[1]):
    line = line.rstrip('\n')
    if line.startswith('fn='):
        fn = name(line[3:]); skip_cost = False
    elif line.startswith('cfn='):
        cfn = name(line[4:])
    elif line.startswith('calls='):
        if 'Connection::produce_new(' in cfn:
            packets += int(line[6:].split()[0])
        skip_cost = True  # the next line is an inclusive call cost
    elif line and (line[0].isdigit() or line[0] in '+-*'):
        if skip_cost:
            skip_cost = False
            continue
        parts = line.split()
        if len(parts) >= 2:
            groups[group(fn)] += int(parts[1])
if packets == 0:
    sys.exit('no packets counted')
total = sum(groups.values())
row = ', '.join(f'{g} {v / packets:.0f}' for g, v in groups.items() if v)
print(f'{sys.argv[2]} (engines {sys.argv[3]}): {total / packets:.0f} instructions per 64 B WRITE '
      f'({packets} messages): {row}')
PY
done

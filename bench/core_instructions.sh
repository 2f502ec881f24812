#!/usr/bin/env bash
# Instructions per data packet of the protocol core (both ends, ACKs
# included): BM_CoreTransfer 64 B under callgrind. Unlike the benchmark's
# time, the count does not move with the VM's spells, so a change to the
# core can be judged in one run.
#
# Counted: everything the benchmark loop calls on the two endpoints
# (Endpoint::transmit, receive, advance), divided by the data packets built
# (calls of Connection::produce_new). Not counted: setting up the pair,
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
  python3 - "$out/cg" "$b" <<'EOF'
import re, sys
names = {}
def name(tok):
    # "(id) name" defines an id, "(id)" refers to one.
    m = re.match(r'\((\d+)\)(?: (.*))?', tok)
    if not m:
        return tok
    if m.group(2):
        names[m.group(1)] = m.group(2)
    return names.get(m.group(1), '')
fn = cfn = ''
pending = False
endpoint_ir = 0
packets = 0
for line in open(sys.argv[1]):
    line = line.rstrip('\n')
    if line.startswith('fn='):
        fn = name(line[3:])
    elif line.startswith('cfn='):
        cfn = name(line[4:])
    elif line.startswith('calls='):
        n = int(line[6:].split()[0])
        if 'Connection::produce_new(' in cfn:
            packets += n
        pending = 'BM_CoreTransfer' in fn and 'braid::Endpoint::' in cfn
    elif pending:
        # The line after calls= holds the inclusive cost of those calls.
        endpoint_ir += int(line.split()[1])
        pending = False
if packets == 0:
    sys.exit('no packets counted')
print(f'{sys.argv[2]}: {endpoint_ir / packets:.0f} instructions per data packet '
      f'({packets} packets)')
EOF
done

#!/usr/bin/env python3
"""Instructions per data packet from a callgrind output file.

Used by bench/core_instructions.sh and bench/verbs_instructions.sh:
  callgrind_count.py endpoint FILE LABEL   what BM_CoreTransfer's loop calls on
                                           the two endpoints (inclusive)
  callgrind_count.py layers FILE LABEL     every instruction counted, grouped by
                                           the layer of the function it is in
Both divide by the data packets carried: calls of Connection::on_data_packet,
the receiver's (the in-memory cables lose nothing; a packet sent again would
count twice, and these benchmarks send none again). Until 2026-12-07 they
divided by the calls of Connection::produce_new, the sender's, which also
counts the calls that build nothing (the last of each transmit burst, and
any a window or the send queue stops): those figures are lower by that
share, 6.3% for 64 B WRITEs, 0.3% for 64 KiB WRITEs, 3.3% for 64 KiB READs,
1.5% for the core's 64 B packets (docs/benchmarks.md).
  callgrind_count.py roundtrips FILE LABEL the same groups per call of
                                           pingpong_step (BM_VerbsPingPong: one
                                           round trip each)
"""
import re
import sys


def records(path):
    """Yields ('self', fn, ir) and ('call', fn, callee, calls, inclusive ir)."""
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
    calls = None
    for line in open(path):
        line = line.rstrip('\n')
        if line.startswith('fn='):
            fn = name(line[3:])
        elif line.startswith('cfn='):
            cfn = name(line[4:])
        elif line.startswith('calls='):
            calls = int(line[6:].split()[0])
        elif line and (line[0].isdigit() or line[0] in '+-*'):
            parts = line.split()
            if len(parts) < 2:
                continue
            if calls is not None:
                # The line after calls= holds the inclusive cost of those calls.
                yield ('call', fn, cfn, calls, int(parts[1]))
                calls = None
            else:
                yield ('self', fn, int(parts[1]))


def layer(fn):
    if 'write_step' in fn:
        return 'verbs'  # braid_post_send, braid_poll_cq, braid_progress, inlined
    if 'MemIo::' in fn:
        return 'cable'
    if 'Engine::' in fn:
        return 'engine'
    if 'braid' in fn:
        return 'core'
    if re.search(r'mem(cpy|move|set)|__tls_get_addr', fn):
        return 'libc'
    return 'other'


def main():
    mode, path, label = sys.argv[1:4]
    packets = 0
    produced = 0  # produce_new calls, built or not
    roundtrips = 0
    endpoint = 0
    groups = dict.fromkeys(['verbs', 'engine', 'core', 'cable', 'libc', 'other'], 0)
    for r in records(path):
        if r[0] == 'call':
            _, fn, callee, n, inclusive = r
            if 'Connection::on_data_packet(' in callee:
                packets += n
            if 'Connection::produce_new(' in callee:
                produced += n
            if 'pingpong_step' in callee:
                roundtrips += n
            # The loop's calls, not the set-up's (constructors, destructor,
            # create_connection: spread over more or fewer packets per run).
            if 'BM_CoreTransfer' in fn and re.search(r'braid::Endpoint::(transmit|receive|advance)\(',
                                                     callee):
                endpoint += inclusive
        else:
            groups[layer(r[1])] += r[2]
    if packets == 0:
        sys.exit('no packets counted')
    if mode == 'roundtrips':
        if roundtrips == 0:
            sys.exit('no round trips counted')
        total = sum(groups.values())
        row = ', '.join(f'{g} {v / roundtrips:.0f}' for g, v in groups.items() if v)
        print(f'{label}: {total / roundtrips:.0f} instructions per round trip ({roundtrips}): {row}')
    elif mode == 'endpoint':
        print(f'{label}: {endpoint / packets:.0f} instructions per data packet ({packets} packets; '
              f'{produced} produce_new calls)')
    else:
        total = sum(groups.values())
        row = ', '.join(f'{g} {v / packets:.0f}' for g, v in groups.items() if v)
        print(f'{label}: {total / packets:.0f} instructions per data packet ({packets} packets; '
              f'{produced} produce_new calls): {row}')


main()

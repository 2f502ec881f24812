#!/usr/bin/env bash
# Braid's libibverbs.so.1 exports every default-version symbol of rdma-core
# 44's (tests/data/rdma-core-44-libibverbs-symbols.txt: node and name, from
# `objdump -T` of Debian's libibverbs1 44.0-2), with the same version node,
# and nothing else: programs linked BIND_NOW against the real one load it.
#   tests/scripts/ibverbs_symbols.sh <build dir>
set -euo pipefail
lib="${1:?build dir}/ibverbs/libibverbs.so.1"
want="$(dirname "$0")/../data/rdma-core-44-libibverbs-symbols.txt"
got=$(objdump -T "$lib" | awk '$0 !~ /\*UND\*/ && $0 ~ /IBVERBS/ {
  sym = $NF; ver = $(NF - 1); if (sym ~ /^IBVERBS/ || ver ~ /^\(/) next; print ver, sym }' | sort)
if ! diff <(sort "$want") <(echo "$got"); then
  echo "ibverbs_symbols: exports differ from rdma-core 44 (< missing, > extra)" >&2
  exit 1
fi
others=$(objdump -T "$lib" | awk '$0 !~ /\*UND\*/ && $0 !~ /IBVERBS/ && $2 == "g"' | wc -l)
if [[ "$others" -ne 0 ]]; then
  echo "ibverbs_symbols: $others unversioned global symbols leak out" >&2
  objdump -T "$lib" | awk '$0 !~ /\*UND\*/ && $0 !~ /IBVERBS/ && $2 == "g"' >&2
  exit 1
fi
echo "ibverbs_symbols: $(echo "$got" | wc -l) symbols, versions as rdma-core 44"

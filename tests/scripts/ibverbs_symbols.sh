#!/usr/bin/env bash
# Braid's libibverbs.so.1 (or librdmacm.so.1) exports every default-version
# symbol of rdma-core 44's (tests/data/rdma-core-44-<lib>-symbols.txt: node
# and name, from `objdump -T` of Debian's libibverbs1 / librdmacm1 44.0-2),
# with the same version node, and nothing else but its BRAID_PRIVATE_1.0
# node (what Braid's librdmacm takes from its libibverbs, and a counter for
# tests): programs linked BIND_NOW against the real one load it.
#   tests/scripts/ibverbs_symbols.sh <build dir> [libibverbs|librdmacm]
set -euo pipefail
name="${2:-libibverbs}"
lib="${1:?build dir}/ibverbs/$name.so.1"
want="$(dirname "$0")/../data/rdma-core-44-$name-symbols.txt"
case "$name" in
  libibverbs) node=IBVERBS private="braid_ibv_create_cm_qp" ;;
  librdmacm) node=RDMACM private="braid_rdmacm_dropped" ;;
  *) echo "ibverbs_symbols: unknown library $name" >&2; exit 2 ;;
esac
got=$(objdump -T "$lib" | awk -v n="$node" '$0 !~ /\*UND\*/ && $0 ~ n {
  sym = $NF; ver = $(NF - 1); if (sym ~ "^" n || ver ~ /^\(/) next; print ver, sym }' | sort)
if ! diff <(sort "$want") <(echo "$got"); then
  echo "ibverbs_symbols: $name's exports differ from rdma-core 44 (< missing, > extra)" >&2
  exit 1
fi
own=$(objdump -T "$lib" | awk 'NF > 2 && $0 !~ /\*UND\*/ && $(NF - 1) == "BRAID_PRIVATE_1.0" && $NF != "BRAID_PRIVATE_1.0" { print $NF }')
if [[ "$own" != "$private" ]]; then
  echo "ibverbs_symbols: $name's BRAID_PRIVATE_1.0 holds '$own', not '$private'" >&2
  exit 1
fi
others=$(objdump -T "$lib" | awk -v n="$node" '$0 !~ /\*UND\*/ && $0 !~ n && $0 !~ /BRAID_PRIVATE_1.0/ && $2 == "g"' | wc -l)
if [[ "$others" -ne 0 ]]; then
  echo "ibverbs_symbols: $others unversioned global symbols leak out of $name" >&2
  objdump -T "$lib" | awk -v n="$node" '$0 !~ /\*UND\*/ && $0 !~ n && $0 !~ /BRAID_PRIVATE_1.0/ && $2 == "g"' >&2
  exit 1
fi
echo "ibverbs_symbols: $name: $(echo "$got" | wc -l) symbols, versions as rdma-core 44; $private of its own"

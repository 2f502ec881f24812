#!/usr/bin/env bash
# Checks that Braid's layers hold (docs/architecture.md):
# - lib/ and include/ include nothing from drivers/, sim/ or apps/, and no
#   DPDK header (rte_*.h);
# - within lib/, no include runs from a lower layer to a higher one:
#   wire < core < net < engine < verbs < ibverbs < nccl, rdmacm;
# - lib/rdmacm includes only its own headers: it stands on libibverbs.so.1's
#   public C API (<infiniband/verbs.h>), as rdma-core's librdmacm does;
# - drivers/ include from lib/ nothing above the engine (its packet I/O
#   interface is what they implement), and nothing from sim/;
# - no build target compiles another folder's sources: every source a
#   CMakeLists.txt or .cmake file names is in that file's own folder tree.
# Prints each violation with file and line; exits 1 if there is any.
#   scripts/check-layers.sh
set -uo pipefail
cd "$(dirname "$0")/.."
fail=0
violation() {
  echo "check-layers: $*"
  fail=1
}

rank() {
  case "$1" in
    wire) echo 1 ;; core) echo 2 ;; net) echo 3 ;; engine) echo 4 ;;
    verbs) echo 5 ;; ibverbs) echo 6 ;; nccl | rdmacm) echo 7 ;; *) echo 0 ;;
  esac
}

# Quoted includes "<folder>/..." and DPDK's <rte_...> in a tree's sources.
includes() {
  grep -rnE --include='*.h' --include='*.cc' --include='*.c' \
    '^[[:space:]]*#[[:space:]]*include[[:space:]]*("[a-z_]+/|<rte_)' "$@" 2>/dev/null
}

# lib/ and include/: nothing from drivers, simulators or apps, no DPDK.
while IFS= read -r hit; do
  file=${hit%%:*}
  inc=$(sed -E 's/.*include[[:space:]]*["<]([^">]+)[">].*/\1/' <<<"$hit")
  case "$inc" in
    rte_*) violation "$file includes DPDK's $inc ($hit)" ;;
    dpdk/* | loopback/* | network/* | fabric/* | switch/* | drivers/* | sim/* | apps/*)
      violation "$file includes $inc, below the library layers (${hit#*:})" ;;
  esac
done < <(includes lib include)

# Within lib/: no include upwards.
while IFS= read -r hit; do
  file=${hit%%:*}
  layer=$(cut -d/ -f2 <<<"$file")
  inc=$(sed -E 's/.*include[[:space:]]*"([^"]+)".*/\1/' <<<"$hit")
  to=${inc%%/*}
  from_rank=$(rank "$layer")
  to_rank=$(rank "$to")
  if [[ $from_rank -gt 0 && $to_rank -gt $from_rank ]]; then
    violation "$file ($layer) includes $inc ($to, a higher layer)"
  fi
done < <(includes lib | grep -v '<rte_')

# lib/rdmacm: its own headers only.
while IFS= read -r hit; do
  inc=$(sed -E 's/.*include[[:space:]]*"([^"]+)".*/\1/' <<<"$hit")
  [[ "$inc" == rdmacm/* ]] || violation "${hit%%:*} (rdmacm) includes $inc: only libibverbs' C API"
done < <(includes lib/rdmacm)

# drivers/: from lib/, the engine's interface at most.
while IFS= read -r hit; do
  file=${hit%%:*}
  inc=$(sed -E 's/.*include[[:space:]]*"([^"]+)".*/\1/' <<<"$hit")
  to=${inc%%/*}
  if [[ $(rank "$to") -gt $(rank engine) ]]; then
    violation "$file (a driver) includes $inc, above the engine"
  fi
  case "$to" in
    network | fabric | switch) violation "$file (a driver) includes $inc, a tool of sim/" ;;
  esac
done < <(includes drivers | grep -v '<rte_')

# Build files: every named source in the file's own folder tree.
while IFS= read -r cm; do
  dir=$(dirname "$cm")
  while IFS= read -r src; do
    resolved=$(sed -E "s#\\\$\\{(PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR)\\}#.#; s#\\\$\\{(CMAKE_CURRENT_SOURCE_DIR|CMAKE_CURRENT_LIST_DIR)\\}#$dir#" <<<"$src")
    [[ "$resolved" == /* || "$resolved" == ./* || "$resolved" == ../* ]] || resolved="$dir/$resolved"
    real=$(realpath -m --relative-to=. "$resolved")
    case "$real/" in
      "$(realpath -m --relative-to=. "$dir")"/*) ;;
      *) violation "$cm compiles $real, another folder's source" ;;
    esac
  done < <(grep -oE '[^[:space:]()"]+\.(cc|c|cpp)\b' "$cm" | grep -v '^#')
done < <(find . -path ./build -prune -o \( -name CMakeLists.txt -o -name '*.cmake' \) -print |
  grep -v '^./build' | sed 's#^\./##')

if [[ $fail -eq 0 ]]; then
  echo "check-layers: the layers hold"
fi
exit "$fail"

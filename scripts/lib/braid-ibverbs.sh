# Shared by the scripts that run unmodified verbs programs over Braid's
# libibverbs.so.1 (source it; bash).

# use_braid_ibverbs <lib dir>: puts Braid's libibverbs.so.1 first for the
# programs started after it. A sanitizer build of the library needs its
# runtimes loaded first, as the programs are not built with them; their own
# leaks are not ours. Returns 1 (with a message) when the library is missing.
use_braid_ibverbs() {
  local lib="$1"
  if [[ ! -e "$lib/libibverbs.so.1" ]]; then
    echo "$lib/libibverbs.so.1 not built (cmake --build --preset release)" >&2
    return 1
  fi
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if readelf -d "$lib/libibverbs.so.1" 2>/dev/null | grep -q 'libasan'; then
    export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  fi
}

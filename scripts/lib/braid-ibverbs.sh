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

# connect_refused <client log>: whether a perftest or ibv_*_pingpong client
# gave up because nothing listened yet. Those clients try their TCP connect
# once, and their server listens only once ibv_open_device has returned,
# which waits for the link, which comes up when the client's port attaches:
# on a loaded machine the client can get to its connect first.
connect_refused() {
  grep -q "Couldn't connect to 127.0.0.1:" "$1"
}

# wait_listening <tcp port> <server pid>: until the server listens on the
# port (or has exited: returns 1).
wait_listening() {
  while ! ss -ltnH "sport = :$1" | grep -q .; do
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
}

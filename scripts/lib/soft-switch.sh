# Braid's software switch (apps/braid_switch) joining N programs on this
# host, each through a memif port of its own (source it; bash). Shared by
# the rank scripts (ranks.sh, mpi-ranks.sh) and rdmacm-loopback.sh.
#
# switch_up <build dir> <run dir> <ports> [memif option suffix] [switch args...]
#   starts the switch on core 0 with <ports> memif server ports (sockets
#   <run dir>/p<R>.sock, the suffix added to each, e.g. ",bsize=10240"),
#   its output in <run dir>/switch.log, and waits until it is ready. Sets
#   switch_pid and switch_ports: the program side of port R (a memif
#   client, MAC 02:00:c6:12:00:<R+1>, for BRAID_IBV_PORT; address
#   198.18.0.<R+1> by convention). Returns 1 (with the switch's output)
#   when it does not start.
# switch_down: stops it.
switch_pid=
switch_ports=()

switch_up() {
  local build="$1" dir="$2" n="$3" suffix="${4:-}" r bin sw=()
  shift 4 2>/dev/null || shift $#
  bin="$build/apps/braid_switch"
  [[ -x "$bin" ]] || { echo "switch: $bin not built" >&2; return 1; }
  switch_ports=()
  for ((r = 0; r < n; r++)); do
    sw+=(--port "net_memif$r,role=server,id=0,socket=$dir/p$r.sock,socket-abstract=no$suffix")
    switch_ports+=("$(printf "net_memif0,role=client,id=0,socket=%s/p%d.sock,socket-abstract=no,mac=02:00:c6:12:00:%02x%s" \
      "$dir" "$r" $((r + 1)) "$suffix")")
  done
  "$bin" --lcore 0 --idle-yield 16 --links 1 "$@" "${sw[@]}" >"$dir/switch.log" 2>&1 &
  switch_pid=$!
  until grep -q "ready" "$dir/switch.log" 2>/dev/null; do
    if ! kill -0 "$switch_pid" 2>/dev/null; then
      echo "switch: braid_switch did not start" >&2
      cat "$dir/switch.log" >&2
      switch_pid=
      return 1
    fi
    sleep 0.05
  done
}

switch_down() {
  [[ -n "$switch_pid" ]] || return 0
  kill -INT "$switch_pid" 2>/dev/null || true
  wait "$switch_pid" 2>/dev/null || true
  switch_pid=
}

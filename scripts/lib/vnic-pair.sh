# Shared by the scripts that run a server and a client on this host joined
# by a DPDK virtual NIC pair (source it; bash).

# vnic_pair <virtio|memif> <run dir> <link MTU> <queue pairs>: sets sock,
# server_port and client_port. virtio: vhost-user on the server side,
# virtio-user on the client side, with that many queue pairs (one per
# engine: --engines, BRAID_IBV_ENGINES); memif: server and client, with
# buffers that hold jumbo frames when the MTU asks for them (memif's queues
# are what each side configures). Queue pairs default to BRAID_IBV_ENGINES.
# Returns 2 for an unknown path.
vnic_pair() {
  local path="$1" dir="$2" mtu="${3:-1500}" queues="${4:-${BRAID_IBV_ENGINES:-1}}"
  case "$path" in
    virtio)
      sock="$dir/vhost.sock"
      server_port="net_vhost0,iface=$sock,queues=$queues"
      client_port="net_virtio_user0,path=$sock,queues=$queues,mac=02:00:c6:12:00:02"
      ;;
    memif)
      sock="$dir/memif.sock"
      server_port="net_memif0,role=server,id=0,socket=$sock,socket-abstract=no"
      client_port="net_memif0,role=client,id=0,socket=$sock,socket-abstract=no"
      if [[ "$mtu" =~ ^[0-9]+$ && "$mtu" -gt 1500 ]]; then
        server_port+=",bsize=10240"
        client_port+=",bsize=10240"
      fi
      ;;
    *) return 2 ;;
  esac
}

# wait_for_socket <socket> <server pid>: until the server has created the
# socket its client attaches to, or has exited. Returns 1 if no socket.
wait_for_socket() {
  for _ in $(seq 1 400); do
    [[ -S "$1" ]] && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  [[ -S "$1" ]]
}

# pair_run_dir <prefix>: makes run_dir (and server_log in it), removed at
# exit together with a server still running ($server_pid).
pair_run_dir() {
  run_dir=$(mktemp -d "/tmp/$1.XXXXXX")
  server_log="$run_dir/server.log"
  trap '[[ -n "${server_pid:-}" ]] && kill "$server_pid" 2>/dev/null; rm -rf "$run_dir"' EXIT
}

# pair_server_ready <name>: after starting the server in the background
# (server_pid, server_log): until it has made $sock; else its output, exit 1.
pair_server_ready() {
  if ! wait_for_socket "$sock" "$server_pid"; then
    echo "$1: the server did not create $sock; its output:" >&2
    cat "$server_log" >&2
    exit 1
  fi
}

# pair_finish <name> <client exit code>: waits for the server, prints its
# output, and exits 1 unless both sides exited 0.
pair_finish() {
  local server_rc=0
  wait "$server_pid" || server_rc=$?
  server_pid=
  echo
  echo "---- server (198.18.0.1) ----"
  cat "$server_log"
  if [[ $2 -ne 0 || $server_rc -ne 0 ]]; then
    echo "$1: client exited $2, server $server_rc" >&2
    exit 1
  fi
}

# Shared by the scripts that run a server and a client on this host joined
# by a DPDK virtual NIC pair (source it; bash).

# vnic_pair <virtio|memif> <run dir> <link MTU>: sets sock, server_port and
# client_port. virtio: vhost-user on the server side, virtio-user on the
# client side; memif: server and client, with buffers that hold jumbo frames
# when the MTU asks for them. Returns 2 for an unknown path.
vnic_pair() {
  local path="$1" dir="$2" mtu="${3:-1500}"
  case "$path" in
    virtio)
      sock="$dir/vhost.sock"
      server_port="net_vhost0,iface=$sock,queues=1"
      client_port="net_virtio_user0,path=$sock,queues=1"
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

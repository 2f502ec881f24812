# TCP ports for the tools' out-of-band exchange (source it; bash).

# tcp_port: a port from 20000 up, below the kernel's ephemeral range (no
# outgoing connection of any process holds one there: a random port in
# that range was taken by one once, and the server could not listen) and
# bound by no socket now.
tcp_port() {
  local lo hi top p hex
  read -r lo hi </proc/sys/net/ipv4/ip_local_port_range
  top=$((lo > 21000 ? lo : 32768))
  for _ in $(seq 1 64); do
    p=$((20000 + RANDOM % (top - 20000)))
    hex=$(printf ':%04X ' "$p")
    if ! grep -qs -- "$hex" /proc/net/tcp /proc/net/tcp6; then
      echo "$p"
      return
    fi
  done
  echo "$p"
}

# A network namespace whose kernel holds the Braid devices' addresses
# (source it; bash), for rdma_cm programs that also open a kernel TCP
# connection to the peer's RDMA address (qperf's control connection) or
# look the address up among the host's interfaces (libfabric's verbs
# provider: getifaddrs). Braid's traffic does not pass through it: it goes
# over the DPDK vNIC; the namespace only makes the kernel know the
# addresses. A veth pair inside the namespace holds them (198.18.0.1 and
# 198.18.0.2, each /32 on its own end); nothing outside it is touched.
#
#   cm_netns_up        makes braid-cm-$$ (root); sets cm_netns and cm_exec
#                      (a command prefix: ip netns exec <ns>)
#   cm_netns_down      removes it

cm_netns_up() {
  cm_netns="braid-cm-$$"
  if [[ $(id -u) -ne 0 ]]; then
    echo "cm-netns: making a network namespace needs root" >&2
    return 1
  fi
  ip netns add "$cm_netns" || return 1
  ip -n "$cm_netns" link set lo up
  ip -n "$cm_netns" link add braid-cm0 type veth peer name braid-cm1
  ip -n "$cm_netns" addr add 198.18.0.1/32 dev braid-cm0
  ip -n "$cm_netns" addr add 198.18.0.2/32 dev braid-cm1
  ip -n "$cm_netns" link set braid-cm0 up
  ip -n "$cm_netns" link set braid-cm1 up
  cm_exec=(ip netns exec "$cm_netns")
}

cm_netns_down() {
  [[ -n "${cm_netns:-}" ]] && ip netns del "$cm_netns" 2>/dev/null
  cm_netns=
  cm_exec=()
}

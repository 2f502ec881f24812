# Network namespaces joined by veth pairs, for the scripts that run Braid
# through the kernel's network (source it; bash; root). Every namespace
# made here is deleted by netns_cleanup (call it from the script's EXIT
# trap). Addresses: 198.18.0.0/15 only.

netns_made=()

# netns_make <who> <name...>: makes each namespace with its loopback up;
# exits 77 (a ctest skip) where namespaces cannot be made.
netns_make() {
  local who="$1" ns
  shift
  for ns in "$@"; do
    if ! ip netns add "$ns" 2>/dev/null; then
      echo "$who: cannot create network namespaces here" >&2
      exit 77
    fi
    netns_made+=("$ns")
    ip -n "$ns" link set lo up
  done
}

# netns_link <ns1> <if1> <ns2> <if2> [mtu]: a veth pair between them, one
# queue each way (AF_XDP serves queue 0 only), both ends up.
netns_link() {
  ip link add "$2" numtxqueues 1 numrxqueues 1 type veth peer name "$4" numtxqueues 1 numrxqueues 1
  ip link set "$2" netns "$1"
  ip link set "$4" netns "$3"
  if [[ -n "${5:-}" ]]; then
    ip -n "$1" link set "$2" mtu "$5"
    ip -n "$3" link set "$4" mtu "$5"
  fi
  ip -n "$1" link set "$2" up
  ip -n "$3" link set "$4" up
}

# netns_cleanup: deletes the namespaces netns_make made (their veths go
# with them).
netns_cleanup() {
  local ns
  for ns in "${netns_made[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  netns_made=()
}

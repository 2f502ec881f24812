# What UCX needs to list a Braid device (sourced).
#
# UCX (1.13, src/uct/ib/base/ib_md.c: uct_ib_device_is_accessible) lists a
# verbs device only if /dev/infiniband/<its dev_name> is a character device
# it may read and write; a DPDK-owned NIC has no kernel verbs node, so UCX
# would skip Braid's device silently. Braid's libibverbs names its device
# uverbs-<name> (uverbs-braid0); this makes that node: a new character
# device with /dev/null's numbers (1, 3), mode 0666. UCX only stats and
# access()es it; nothing opens it for I/O. No existing node is touched:
# one already there under the name is left alone (and kept).
#
#   ucx_device_node_up [name]   make /dev/infiniband/uverbs-<name> (root)
#   ucx_device_node_down        remove what ucx_device_node_up made

ucx_device_node_up() {
  local name="${1:-braid0}"
  ucx_node="/dev/infiniband/uverbs-$name"
  ucx_node_made=()
  if [[ -e "$ucx_node" ]]; then
    [[ -c "$ucx_node" ]] && return 0
    echo "ucx-device: $ucx_node exists and is not a character device" >&2
    return 1
  fi
  if [[ $(id -u) -ne 0 ]]; then
    echo "ucx-device: $ucx_node is missing and making it needs root" >&2
    return 1
  fi
  if [[ ! -d /dev/infiniband ]]; then
    mkdir /dev/infiniband
    ucx_node_made+=(/dev/infiniband)
  fi
  mknod -m 0666 "$ucx_node" c 1 3
  ucx_node_made=("$ucx_node" "${ucx_node_made[@]}")
}

ucx_device_node_down() {
  local p
  for p in "${ucx_node_made[@]}"; do
    if [[ -d "$p" ]]; then rmdir "$p" 2>/dev/null || true; else rm -f "$p"; fi
  done
  ucx_node_made=()
}

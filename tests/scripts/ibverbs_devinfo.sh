#!/usr/bin/env bash
# Debian's unmodified ibv_devices and ibv_devinfo -v see Braid's device
# through its libibverbs.so.1 (a net_null port: no peer needed): one ACTIVE
# Ethernet port with an MTU and a RoCE v2 IPv4-mapped GID; with no
# configuration, no device.
#   tests/scripts/ibverbs_devinfo.sh <build dir>
set -euo pipefail
lib="$(realpath "${1:?build dir}")/ibverbs"
command -v ibv_devinfo >/dev/null || { echo "ibv_devinfo missing (apt-get install ibverbs-utils)" >&2; exit 1; }
export LD_LIBRARY_PATH="$lib"
if readelf -d "$lib/libibverbs.so.1" | grep -q libasan; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0
fi
fail() { echo "ibverbs_devinfo: $1" >&2; echo "$out" >&2; exit 1; }

out=$(env -u BRAID_IBV_PORT BRAID_IBV_CONFIG=/dev/null ibv_devices 2>&1) || true
grep -q braid0 <<<"$out" && fail "a device is listed without configuration"

export BRAID_IBV_PORT=net_null0 BRAID_IBV_IP=198.18.0.7 BRAID_IBV_LCORE=0
out=$(ibv_devices 2>&1) || fail "ibv_devices failed"
grep -Eq 'braid0[[:space:]]+02b7a1d0c6120007' <<<"$out" || fail "braid0 and its GUID not listed"
out=$(ibv_devinfo -v 2>&1) || fail "ibv_devinfo -v failed"
for want in 'hca_id:[[:space:]]+braid0' 'state:[[:space:]]+PORT_ACTIVE \(4\)' \
  'link_layer:[[:space:]]+Ethernet' 'active_mtu:[[:space:]]+1024 \(3\)' \
  'GID\[  0\]:[[:space:]]+::ffff:198.18.0.7, RoCE v2' 'max_qp_rd_atom:[[:space:]]+128'; do
  grep -Eq "$want" <<<"$out" || fail "no line matching '$want'"
done
echo "ibverbs_devinfo: braid0 listed and described"

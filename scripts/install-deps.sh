#!/usr/bin/env bash
# Installs the Debian 12 packages Braid builds with, only those missing.
# Usage (as root): scripts/install-deps.sh [--fuzz]
set -euo pipefail

# libibverbs-dev: rdma-core's verbs.h, the ABI lib/ibverbs implements;
# perftest, ibverbs-utils: the unmodified programs its tests run;
# python3-pyverbs: rdma-core's own test suite (tests/rdma-core);
# iproute2: the namespace tests; nlohmann-json3-dev: braid_fabric's scenario files.
# libgloo-dev: Gloo's collectives over Braid (apps/gloo); libssl-dev: AES-GCM
# and HMAC (libcrypto) for the authenticated mode; ucx-utils: ucx_perftest over
# Braid (scripts/ucx-loopback.sh); openmpi-bin, libopenmpi-dev: Open MPI over
# Braid (apps/mpi, scripts/mpi-ranks.sh); librdmacm-dev, rdmacm-utils, qperf:
# rdma_cm's header (lib/rdmacm) and the programs its tests run; libfabric-bin:
# fi_info and fi_pingpong over libfabric's verbs provider.
pkgs=(cmake ninja-build g++ pkg-config libgtest-dev libgmock-dev libbenchmark-dev
      libspdlog-dev libfmt-dev libcli11-dev libdpdk-dev dpdk libibverbs-dev perftest
      ibverbs-utils python3-pyverbs iproute2 nlohmann-json3-dev libgloo-dev
      libssl-dev ucx-utils openmpi-bin libopenmpi-dev librdmacm-dev rdmacm-utils qperf libfabric-bin)
if [[ "${1:-}" == "--fuzz" ]]; then
  pkgs+=(clang-14 libclang-rt-14-dev)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "braid: installing ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "braid: missing packages and not root; run as root or install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

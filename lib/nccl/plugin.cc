// libnccl-net-braid.so: NCCL's network plugin (interface versions 7, 8 and 10)
// on Braid's verbs API, for host memory (NCCL_PTR_HOST).
//
// One device per Braid port, configured as Braid's libibverbs.so.1 is
// (BRAID_IBV_PORT, BRAID_IBV_IP... or /etc/braid/ibverbs.conf; see
// lib/ibverbs/config.h), opened by init with a progress thread: NCCL calls
// in from its main and proxy threads. Every comm is one RC QP, sprayed over
// all the port's entropies like any other, with a CQ of its own.
//
// The mapping (docs/collectives.md):
// - Each irecv (n buffers, tags, sizes) posts n zero-length receives and
//   SENDs the sender a 200-byte descriptor: a sequence number and each
//   buffer's address, rkey, size and tag. The sender keeps 32 receive
//   buffers posted for descriptors (one per request NCCL may have in flight).
// - isend takes the descriptor of the receive it matches (in order; by tag
//   within a grouped receive; no request while no buffer has its tag) and RDMA_WRITE_WITH_IMMs its
//   data straight into the receiver's buffer; the immediate names the descriptor slot and buffer,
//   the receive completion's byte_len the size. RC order makes the data visible before that
//   completion.
// - listen/connect/accept exchange QP numbers, PSNs and addresses over a
//   non-blocking TCP connection whose address is in the handle; it stays
//   open so that a peer that dies is noticed (its end closes) by a request
//   that waits for it.
//
// Files: device.cc (init, properties, memory registration), comm.cc (comms
// and completions), setup.cc (listen, connect, accept), transfer.cc
// (isend, irecv, test); this one holds the tables NCCL looks up.
#include "nccl/plugin_internal.h"

using namespace braid::nccl;

extern "C" {

__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {
    "Braid",
    braid_init_v10,
    braid_devices,
    braid_get_properties_v10,
    braid_listen,
    braid_connect_v10,
    braid_accept,
    braid_reg_mr,
    braid_reg_mr_dmabuf,
    braid_dereg_mr,
    braid_isend_v10,
    braid_irecv_v10,
    braid_iflush,
    braid_test,
    braid_close_comm,
    braid_close_comm,
    braid_close_listen,
    nullptr,  // getDeviceMr: no device offload
    nullptr,  // irecvConsumed: idem
    braid_make_vdevice,
};

__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = {
    "Braid",
    braid_init_v8,
    braid_devices,
    braid_get_properties_v8,
    braid_listen,
    braid_connect_v8,
    braid_accept,
    braid_reg_mr,
    braid_reg_mr_dmabuf,
    braid_dereg_mr,
    braid_isend_v8,
    braid_irecv_v8,
    braid_iflush,
    braid_test,
    braid_close_comm,
    braid_close_comm,
    braid_close_listen,
    nullptr,
    nullptr,
};

// NCCL 2.19 looks for v7 (and older) only.
__attribute__((visibility("default"))) ncclNet_v7_t ncclNetPlugin_v7 = {
    "Braid",
    braid_init_v8,
    braid_devices,
    braid_get_properties_v7,
    braid_listen,
    braid_connect_v8,
    braid_accept,
    braid_reg_mr_v7,
    braid_reg_mr_dmabuf,
    braid_dereg_mr,
    braid_isend_v8,
    braid_irecv_v8,
    braid_iflush,
    braid_test,
    braid_close_comm,
    braid_close_comm,
    braid_close_listen,
    nullptr,
    nullptr,
};

}  // extern "C"

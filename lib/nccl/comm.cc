// The NCCL plugin's comms: one RC QP each with a CQ of its own, connected
// with what the set-up exchanged, and their completions.
#include <arpa/inet.h>
#include <time.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

#include "braid/connect.h"
#include "nccl/plugin_internal.h"

namespace braid::nccl {

// The transport's view of a comm, for NCCL_DEBUG=INFO and for failures.
void log_qp_stats(const Comm* c, ncclDebugLogLevel level) {
  braid_qp_stats s{};
  if (c->qp == nullptr || braid_query_qp_stats(c->qp, &s) != 0) return;
  BRAID_NCCL_LOG(level,
                 "%s comm (QP %u): %llu packets sent, %llu received, %llu retransmitted (lost: "
                 "%llu inferred, %llu nacked, %llu timed out), %llu timeouts, %llu duplicates, "
                 "srtt %.1f us",
                 c->kind == Kind::kSend ? "send" : "receive", braid_qp_num(c->qp),
                 static_cast<unsigned long long>(s.data_packets_sent),
                 static_cast<unsigned long long>(s.data_packets_received),
                 static_cast<unsigned long long>(s.retransmits),
                 static_cast<unsigned long long>(s.lost_inferred),
                 static_cast<unsigned long long>(s.lost_nacked),
                 static_cast<unsigned long long>(s.lost_timeout),
                 static_cast<unsigned long long>(s.timeouts),
                 static_cast<unsigned long long>(s.duplicates), s.srtt_ns / 1000.0);
  braid_port_stats p{};
  if (braid_query_port_stats(g_dev.ctx, &p) != 0) return;
  BRAID_NCCL_LOG(level,
                 "device %s: %llu frames received, %llu refused, %llu missed by the NIC, %llu "
                 "lost by the NIC",
                 g_dev.name.c_str(), static_cast<unsigned long long>(p.rx_frames),
                 static_cast<unsigned long long>(p.rx_dropped),
                 static_cast<unsigned long long>(p.rx_missed),
                 static_cast<unsigned long long>(p.tx_dropped));
}

ncclResult_t fail_comm(Comm* c, ncclResult_t code, const char* why) {
  if (c->failed == ncclSuccess) {
    c->failed = code;
    WARN("%s comm (QP %u): %s", c->kind == Kind::kSend ? "send" : "receive",
         c->qp != nullptr ? braid_qp_num(c->qp) : 0u, why);
    log_qp_stats(c, NCCL_LOG_WARN);
  }
  return c->failed;
}

void destroy_comm(Comm* c) {
  if (c == nullptr) return;
  if (c->qp != nullptr) log_qp_stats(c, NCCL_LOG_INFO);
  if (c->qp != nullptr) braid_destroy_qp(c->qp);
  if (c->cq != nullptr) braid_destroy_cq(c->cq);
  if (c->bufs_mr != nullptr) braid_dereg_mr(c->bufs_mr);
  std::free(c->bufs);
  if (c->fd >= 0) braid_exchange_close(c->fd);
  delete c;
}

ncclResult_t post_descriptor_buffer(Comm* c, int i) {
  braid_sge sge{reinterpret_cast<uintptr_t>(&c->bufs[i]), sizeof(Descriptor), c->bufs_mr->lkey};
  braid_recv_wr wr{};
  wr.wr_id = kWrDescriptor | (static_cast<uint64_t>(i) << 8);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  braid_recv_wr* bad = nullptr;
  if (const int err = braid_post_recv(c->qp, &wr, &bad)) {
    char why[96];
    std::snprintf(why, sizeof why, "posting a descriptor buffer: %s", std::strerror(err));
    return fail_comm(c, ncclSystemError, why);
  }
  return ncclSuccess;
}

// A comm with its CQ, its QP in INIT and (sender) its descriptor buffers
// posted; nullptr after a warning.
Comm* create_comm(Kind kind) {
  auto* c = new (std::nothrow) Comm(kind);
  if (c == nullptr) return nullptr;
  std::random_device rd;
  c->psn = rd();  // 32 random bits: Braid's API takes full PSNs
  for (uint8_t& b : c->nonce) b = static_cast<uint8_t>(rd());
  c->cq = braid_create_cq(g_dev.ctx, kCqDepth, c, nullptr, 0);
  c->bufs = static_cast<Descriptor*>(std::calloc(kSlots, sizeof(Descriptor)));
  if (c->cq == nullptr || c->bufs == nullptr) {
    WARN("cannot create a comm's CQ: %s", braid_last_error());
    destroy_comm(c);
    return nullptr;
  }
  c->bufs_mr =
      braid_reg_mr(g_dev.pd, c->bufs, kSlots * sizeof(Descriptor), BRAID_ACCESS_LOCAL_WRITE);
  braid_qp_init_attr init{};
  init.send_cq = c->cq;
  init.recv_cq = c->cq;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = kRecvDepth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.qp_type = BRAID_QPT_RC;
  c->qp = c->bufs_mr != nullptr ? braid_create_qp(g_dev.pd, &init) : nullptr;
  if (c->qp == nullptr) {
    WARN("cannot create a comm's QP: %s", braid_last_error());
    destroy_comm(c);
    return nullptr;
  }
  braid_qp_attr attr{};
  attr.qp_state = BRAID_QPS_INIT;
  attr.port_num = 1;
  attr.qp_access_flags = BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE;
  if (const int err = braid_modify_qp(
          c->qp, &attr,
          BRAID_QP_STATE | BRAID_QP_PKEY_INDEX | BRAID_QP_PORT | BRAID_QP_ACCESS_FLAGS)) {
    WARN("cannot move a comm's QP to INIT: %s", std::strerror(err));
    destroy_comm(c);
    return nullptr;
  }
  if (kind == Kind::kSend) {
    for (int i = 0; i < kSlots; ++i) {
      if (post_descriptor_buffer(c, i) != ncclSuccess) {
        destroy_comm(c);
        return nullptr;
      }
    }
  }
  return c;
}

PeerInfo info_of(const Comm* c) {
  PeerInfo p{};
  p.magic = htonl(kInfoMagic);
  p.qpn = htonl(braid_qp_num(c->qp));
  p.psn = htonl(c->psn);
  std::memcpy(p.gid, g_dev.gid.raw, sizeof p.gid);
  std::memcpy(p.nonce, c->nonce, sizeof p.nonce);
  return p;
}

// RTR then RTS towards the peer `p` describes.
ncclResult_t connect_qp(Comm* c, const PeerInfo& p) {
  if (ntohl(p.magic) != kInfoMagic) {
    WARN("connection set-up: the peer is not a Braid NCCL plugin of this version");
    return ncclRemoteError;
  }
  braid_qp_attr attr{};
  attr.qp_state = BRAID_QPS_RTR;
  attr.path_mtu = g_dev.mtu;
  attr.dest_qp_num = ntohl(p.qpn);
  attr.rq_psn = ntohl(p.psn);
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  std::memcpy(attr.ah_attr.dgid.raw, p.gid, sizeof p.gid);
  attr.ah_attr.port_num = 1;
  // Keys new for this connection in the authenticated mode (ignored off).
  for (size_t i = 0; i < sizeof attr.auth_nonce; ++i) attr.auth_nonce[i] = c->nonce[i] ^ p.nonce[i];
  int err = braid_modify_qp(c->qp, &attr,
                            BRAID_QP_STATE | BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN |
                                BRAID_QP_RQ_PSN | BRAID_QP_MAX_DEST_RD_ATOMIC |
                                BRAID_QP_MIN_RNR_TIMER | BRAID_QP_AUTH_NONCE);
  if (err == 0) {
    attr = braid_qp_attr{};
    attr.qp_state = BRAID_QPS_RTS;
    attr.sq_psn = c->psn;
    attr.timeout = 14;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    err = braid_modify_qp(c->qp, &attr,
                          BRAID_QP_STATE | BRAID_QP_SQ_PSN | BRAID_QP_TIMEOUT | BRAID_QP_RETRY_CNT |
                              BRAID_QP_RNR_RETRY | BRAID_QP_MAX_QP_RD_ATOMIC);
  }
  if (err != 0) {
    WARN("connection set-up: cannot connect QP %u: %s (%s)", braid_qp_num(c->qp),
         std::strerror(err), braid_last_error());
    return ncclSystemError;
  }
  return ncclSuccess;
}

// Non-blocking transfer of a fixed-size message, resumed at *off: 1 when
// whole, 0 to call again, -1 on error (the peer gone).
// ---- Completions ------------------------------------------------------

ncclResult_t on_completion(Comm* c, const braid_wc& wc) {
  if (wc.status != BRAID_WC_SUCCESS) {
    char why[128];
    std::snprintf(why, sizeof why, "work completion with error status %d%s", wc.status,
                  wc.status == BRAID_WC_RETRY_EXC_ERR  ? " (retries exhausted: the peer is gone)"
                  : wc.status == BRAID_WC_WR_FLUSH_ERR ? " (flushed)"
                                                       : "");
    return fail_comm(c,
                     wc.status == BRAID_WC_RETRY_EXC_ERR || wc.status == BRAID_WC_REM_ACCESS_ERR ||
                             wc.status == BRAID_WC_REM_OP_ERR ||
                             wc.status == BRAID_WC_REM_INV_REQ_ERR
                         ? ncclRemoteError
                         : ncclSystemError,
                     why);
  }
  if (wc.opcode == BRAID_WC_RECV_RDMA_WITH_IMM) {
    // Receiver: a buffer of a posted receive is filled.
    const uint32_t imm = ntohl(wc.imm_data);
    const uint32_t slot = (imm >> 3) % kSlots, idx = imm & 7;
    Request* r = c->by_slot[slot];
    if (r == nullptr || static_cast<int>(idx) >= r->n || r->pending <= 0) {
      return fail_comm(c, ncclRemoteError, "data for a receive that was not posted");
    }
    r->sizes[idx] = wc.byte_len;
    if (--r->pending == 0) c->by_slot[slot] = nullptr;
    return ncclSuccess;
  }
  if (wc.opcode == BRAID_WC_RECV && (wc.wr_id & 0xff) == kWrDescriptor) {
    // Sender: a receive's descriptor.
    const int i = static_cast<int>((wc.wr_id >> 8) % kSlots);
    const Descriptor& d = c->bufs[i];
    if (wc.byte_len != sizeof(Descriptor) || d.n == 0 || d.n > kMaxRecvs) {
      return fail_comm(c, ncclRemoteError, "malformed receive descriptor");
    }
    const uint32_t slot = d.seq % kSlots;
    c->got[slot] = d;
    c->have[slot] = true;
    return post_descriptor_buffer(c, i);
  }
  if (wc.opcode == BRAID_WC_RDMA_WRITE) {
    // Sender: a request's data is delivered (wr_id is the request).
    Request* r = reinterpret_cast<Request*>(wc.wr_id);
    if (r->pending > 0) --r->pending;
    return ncclSuccess;
  }
  return ncclSuccess;  // a descriptor sent
}

// Polls the comm's CQ (which drives Braid's engine).
ncclResult_t progress(Comm* c) {
  braid_wc wc[16];
  for (;;) {
    const int n = braid_poll_cq(c->cq, 16, wc);
    if (n < 0) return fail_comm(c, ncclSystemError, "polling the CQ failed");
    for (int i = 0; i < n; ++i) {
      if (const ncclResult_t r = on_completion(c, wc[i]); r != ncclSuccess) return r;
    }
    if (n < 16) return c->failed;
  }
}

// Every 10 ms of waiting: whether the peer's end of the TCP connection is
// closed (its process exited).
bool peer_closed(Comm* c) {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const int64_t ms =
      (now.tv_sec - c->last_check.tv_sec) * 1000 + (now.tv_nsec - c->last_check.tv_nsec) / 1000000;
  if (ms < 10) return false;
  c->last_check = now;
  return braid_exchange_peer_closed(c->fd) == 1;
}

ncclResult_t peer_gone(Comm* c) {
  return fail_comm(c, ncclRemoteError, "the peer closed its connection (process exited?)");
}

Request* new_request(Comm* c, int n) {
  for (Request& r : c->reqs) {
    if (!r.used) {
      r = Request{};
      r.comm = c;
      r.used = true;
      r.n = n;
      return &r;
    }
  }
  return nullptr;
}

}  // namespace braid::nccl

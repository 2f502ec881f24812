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
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <random>
#include <string>

#include "braid/verbs.h"
#include "ibverbs/config.h"
#include "nccl/nccl_net.h"

namespace {

constexpr int kMaxRecvs = 8;                             // buffers of one grouped receive
constexpr int kSlots = NCCL_NET_MAX_REQUESTS;            // requests in flight per comm
constexpr uint64_t kHandleMagic = 0x4252414944'4e43ull;  // "BRAIDNC"
constexpr uint32_t kInfoMagic = 0x42524e32;              // "BRN2": with the nonce
constexpr int kCqDepth = 1024;
constexpr uint32_t kSendDepth = 2 * kSlots;
constexpr uint32_t kRecvDepth = kSlots * kMaxRecvs + kSlots;

ncclDebugLogger_t g_logger = nullptr;

#define BRAID_NCCL_LOG(level, ...) log_line(level, __FILE__, __LINE__, __VA_ARGS__)
#define WARN(...) BRAID_NCCL_LOG(NCCL_LOG_WARN, __VA_ARGS__)
#define INFO(...) BRAID_NCCL_LOG(NCCL_LOG_INFO, __VA_ARGS__)

__attribute__((format(printf, 4, 5))) void log_line(ncclDebugLogLevel level, const char* file,
                                                    int line, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g_logger != nullptr) {
    g_logger(level, NCCL_NET, file, line, "NET/Braid : %s", msg);
  } else if (level == NCCL_LOG_WARN) {
    std::fprintf(stderr, "NET/Braid : %s\n", msg);
  }
}

// The device: one Braid port, opened by init.
struct Device {
  braid_context* ctx = nullptr;
  braid_pd* pd = nullptr;
  std::string name;
  union braid_gid gid {};
  enum braid_mtu mtu = BRAID_MTU_1024;
  int speed_mbps = 0;
  int max_qp = 0;
  uint32_t oob_ip = 0;  // network order: where listen's TCP socket is
};
std::mutex g_init_mu;
bool g_init_done = false;
ncclResult_t g_init_result = ncclSuccess;
Device g_dev;

// The address listen advertises: BRAID_NCCL_OOB_ADDR, else the first IPv4
// address of an up, non-loopback kernel interface, else 127.0.0.1.
uint32_t pick_oob_ip() {
  in_addr a{};
  if (const char* env = std::getenv("BRAID_NCCL_OOB_ADDR"); env != nullptr && *env != '\0') {
    if (inet_pton(AF_INET, env, &a) == 1) return a.s_addr;
    WARN("BRAID_NCCL_OOB_ADDR=%s is not an IPv4 address; using 127.0.0.1", env);
    return htonl(INADDR_LOOPBACK);
  }
  ifaddrs* list = nullptr;
  uint32_t ip = htonl(INADDR_LOOPBACK);
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
      ip = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      break;
    }
    freeifaddrs(list);
  }
  return ip;
}

ncclResult_t open_device() {
  std::string error;
  const braid::ibv::DeviceSettings s = braid::ibv::load_settings(&error);
  if (!error.empty()) {
    WARN("%s", error.c_str());
    return ncclInvalidArgument;
  }
  if (!s.usable()) {
    WARN("no Braid port configured: set BRAID_IBV_PORT and BRAID_IBV_IP (or %s)",
         "/etc/braid/ibverbs.conf");
    return ncclInvalidArgument;
  }
  braid_device_config cfg = s.to_config();
  cfg.progress_thread = 1;   // NCCL's threads call in; the engine runs between calls
  cfg.rtr_arp_wait_us = -1;  // connect and accept never wait for ARP
  g_dev.ctx = braid_open_device(&cfg);
  if (g_dev.ctx == nullptr) {
    WARN("cannot open Braid port %s: %s", s.port.c_str(), braid_last_error());
    return ncclSystemError;
  }
  g_dev.pd = braid_alloc_pd(g_dev.ctx);
  braid_port_attr port{};
  braid_device_attr dev{};
  if (g_dev.pd == nullptr || braid_query_port(g_dev.ctx, 1, &port) != 0 ||
      braid_query_device(g_dev.ctx, &dev) != 0 ||
      braid_query_gid(g_dev.ctx, 1, 0, &g_dev.gid) != 0) {
    WARN("cannot set up Braid port %s: %s", s.port.c_str(), braid_last_error());
    if (g_dev.pd != nullptr) braid_dealloc_pd(g_dev.pd);
    braid_close_device(g_dev.ctx);
    g_dev.ctx = nullptr;
    return ncclSystemError;
  }
  g_dev.name = s.name;
  g_dev.mtu = port.active_mtu;
  g_dev.speed_mbps = cfg.link_mbps != 0 ? static_cast<int>(cfg.link_mbps) : 100000;
  g_dev.max_qp = dev.max_qp;
  g_dev.oob_ip = pick_oob_ip();
  char oob[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &g_dev.oob_ip, oob, sizeof oob);
  INFO("device %s on port %s (%s), %s; connections set up over TCP on %s", s.name.c_str(),
       s.port.c_str(), s.ip.c_str(), port.state == BRAID_PORT_ACTIVE ? "link up" : "link DOWN",
       oob);
  return ncclSuccess;
}

ncclResult_t init_common(ncclDebugLogger_t logger) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (logger != nullptr) g_logger = logger;
  if (!g_init_done) {
    g_init_result = open_device();
    g_init_done = true;
  }
  return g_init_result;
}

ncclResult_t check_dev(int dev) {
  if (!g_init_done || g_init_result != ncclSuccess) {
    WARN("called before a successful init");
    return ncclInvalidArgument;
  }
  if (dev != 0) {
    WARN("no device %d (one Braid port: device 0)", dev);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

// ---- What the connection set-up exchanges over TCP -------------------

struct Handle {
  uint64_t magic;
  uint32_t ip;    // network order
  uint16_t port;  // network order
  uint16_t pad;
  struct Pending* pending;  // connect's progress, between its calls
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE);

struct PeerInfo {  // network byte order
  uint32_t magic, qpn, psn;
  uint8_t gid[16];
  uint8_t nonce[16];  // this end's half of the connection's auth_nonce
};

// ---- Comms and requests ----------------------------------------------

// The receiver's description of one irecv, SENT to the sender.
struct Descriptor {
  uint32_t seq;
  uint32_t n;
  uint64_t addr[kMaxRecvs];
  uint64_t size[kMaxRecvs];
  uint32_t rkey[kMaxRecvs];
  int32_t tag[kMaxRecvs];
};

enum class Kind : uint8_t { kSend, kRecv };

struct Comm;
struct Request {
  Comm* comm = nullptr;
  bool used = false;
  int n = 1;
  int pending = 0;  // completions still to come
  uint64_t sizes[kMaxRecvs] = {};
};

// wr_id of work requests that are not a request's data.
constexpr uint64_t kWrDescriptor = 1;  // sender: a receive buffer for descriptors (| index << 8)
constexpr uint64_t kWrDescriptorSend = 2;  // receiver: a descriptor sent
constexpr uint64_t kWrDataRecv = 3;        // receiver: a zero-length receive for WRITE_WITH_IMM

struct Comm {
  Kind kind;
  int fd = -1;
  braid_cq* cq = nullptr;
  braid_qp* qp = nullptr;
  uint32_t psn = 0;
  uint8_t nonce[16] = {};  // random: XORed with the peer's into the QP's auth_nonce
  Request reqs[kSlots];
  ncclResult_t failed = ncclSuccess;
  timespec last_check{};
  // Descriptors: the sender's receive buffers (kSlots), the receiver's send
  // buffers (kSlots, one per slot); registered.
  Descriptor* bufs = nullptr;
  braid_mr* bufs_mr = nullptr;
  // Sender: descriptors received, by slot (seq % kSlots); the receive
  // matched next and which of its buffers have been sent to.
  Descriptor got[kSlots] = {};
  bool have[kSlots] = {};
  uint32_t send_seq = 0;
  uint32_t sent_mask = 0;
  // Receiver: the request of each slot, and the next irecv's sequence.
  Request* by_slot[kSlots] = {};
  uint32_t recv_seq = 0;

  explicit Comm(Kind k) : kind(k) {}
};

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
  if (c->fd >= 0) close(c->fd);
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
int send_some(int fd, const void* buf, size_t len, size_t* off) {
  while (*off < len) {
    const ssize_t n = send(fd, static_cast<const char*>(buf) + *off, len - *off, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    *off += static_cast<size_t>(n);
  }
  return 1;
}
int recv_some(int fd, void* buf, size_t len, size_t* off) {
  while (*off < len) {
    const ssize_t n = recv(fd, static_cast<char*>(buf) + *off, len - *off, 0);
    if (n == 0) return -1;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    *off += static_cast<size_t>(n);
  }
  return 1;
}

// The progress of one connect or accept, between NCCL's calls.
struct Pending {
  Comm* comm = nullptr;
  int stage = 0;
  size_t off = 0;
  PeerInfo mine{}, theirs{};
  uint8_t ready = 1;
};

struct Listen {
  int fd = -1;
  Pending* pending = nullptr;
};

void drop_pending(Pending* p) {
  if (p == nullptr) return;
  destroy_comm(p->comm);
  delete p;
}

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
  char b;
  const ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
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

// ---- The interface ----------------------------------------------------

ncclResult_t braid_devices(int* ndev) {
  *ndev = g_init_done && g_init_result == ncclSuccess ? 1 : 0;
  return ncclSuccess;
}

template <typename Props>
void fill_common(Props* p) {
  p->name = const_cast<char*>(g_dev.name.c_str());
  p->pciPath = nullptr;  // a DPDK port: no PCI function NCCL could place
  p->guid = (uint64_t{BRAID_VENDOR_ID} << 32) | ntohl(g_dev.oob_ip);
  p->ptrSupport = NCCL_PTR_HOST;
  if constexpr (requires { p->regIsGlobal; }) p->regIsGlobal = 1;  // on the device's PD
  p->speed = g_dev.speed_mbps;
  p->port = 1;
  p->latency = 0;
  p->maxComms = g_dev.max_qp;
  p->maxRecvs = kMaxRecvs;
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
}

ncclResult_t braid_get_properties_v8(int dev, ncclNetProperties_v8_t* props) {
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  *props = ncclNetProperties_v8_t{};
  fill_common(props);
  return ncclSuccess;
}

ncclResult_t braid_get_properties_v7(int dev, ncclNetProperties_v7_t* props) {
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  *props = ncclNetProperties_v7_t{};
  fill_common(props);
  return ncclSuccess;
}

ncclResult_t braid_get_properties_v10(int dev, ncclNetProperties_v10_t* props) {
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  *props = ncclNetProperties_v10_t{};
  fill_common(props);
  props->forceFlush = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = 0x7fffffff;  // one message: Braid's max_msg_sz
  props->maxCollBytes = 0x7fffffff;
  return ncclSuccess;
}

ncclResult_t braid_listen(int dev, void* opaque_handle, void** listen_comm) {
  *listen_comm = nullptr;
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  auto* l = new Listen;
  l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = g_dev.oob_ip;
  socklen_t len = sizeof a;
  if (l->fd < 0 || bind(l->fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(l->fd, 128) != 0 || getsockname(l->fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    WARN("listen: cannot listen on TCP: %s", std::strerror(errno));
    if (l->fd >= 0) close(l->fd);
    delete l;
    return ncclSystemError;
  }
  Handle h{};
  h.magic = kHandleMagic;
  h.ip = a.sin_addr.s_addr;
  h.port = a.sin_port;
  std::memset(opaque_handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  std::memcpy(opaque_handle, &h, sizeof h);
  *listen_comm = l;
  return ncclSuccess;
}

ncclResult_t connect_common(int dev, void* opaque_handle, void** send_comm) {
  *send_comm = nullptr;
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  Handle h;
  std::memcpy(&h, opaque_handle, sizeof h);
  if (h.magic != kHandleMagic) {
    WARN("connect: the handle is not one of this plugin's");
    return ncclInvalidArgument;
  }
  Pending* p = h.pending;
  auto save = [&] {
    h.pending = p;
    std::memcpy(opaque_handle, &h, sizeof h);
  };
  auto fail = [&](ncclResult_t code, const char* why) {
    if (why != nullptr) WARN("connect: %s", why);
    drop_pending(p);
    p = nullptr;
    save();
    return code;
  };
  if (p == nullptr) {
    p = new Pending;
    p->comm = create_comm(Kind::kSend);
    if (p->comm == nullptr) return fail(ncclSystemError, nullptr);
    p->comm->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1;
    setsockopt(p->comm->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = h.ip;
    a.sin_port = h.port;
    if (p->comm->fd < 0 ||
        (::connect(p->comm->fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 &&
         errno != EINPROGRESS)) {
      return fail(ncclSystemError, std::strerror(errno));
    }
    p->mine = info_of(p->comm);
    p->stage = 1;
  }
  Comm* c = p->comm;
  if (p->stage == 1) {  // TCP connected?
    pollfd pfd{c->fd, POLLOUT, 0};
    if (poll(&pfd, 1, 0) == 0) return save(), ncclSuccess;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return fail(ncclSystemError, std::strerror(err));
    p->stage = 2;
    p->off = 0;
  }
  if (p->stage == 2) {  // our QP's description out
    const int r = send_some(c->fd, &p->mine, sizeof p->mine, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the listener closed the connection");
    if (r == 0) return save(), ncclSuccess;
    p->stage = 3;
    p->off = 0;
  }
  if (p->stage == 3) {  // theirs in: connect our QP
    const int r = recv_some(c->fd, &p->theirs, sizeof p->theirs, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the listener closed the connection");
    if (r == 0) return save(), ncclSuccess;
    if (const ncclResult_t e = connect_qp(c, p->theirs); e != ncclSuccess) return fail(e, nullptr);
    p->stage = 4;
    p->off = 0;
  }
  if (p->stage == 4) {  // "ready": our QP takes the receiver's descriptors
    const int r = send_some(c->fd, &p->ready, 1, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the listener closed the connection");
    if (r == 0) return save(), ncclSuccess;
  }
  *send_comm = c;
  delete p;
  p = nullptr;
  save();
  return ncclSuccess;
}

ncclResult_t braid_connect_v8(int dev, void* handle, void** send_comm,
                              ncclNetDeviceHandle_v8_t** /*send_dev_comm: no offload*/) {
  return connect_common(dev, handle, send_comm);
}
ncclResult_t braid_connect_v10(int dev, ncclNetCommConfig_v10_t* /*config*/, void* handle,
                               void** send_comm, ncclNetDeviceHandle_v10_t** /*send_dev_comm*/) {
  return connect_common(dev, handle, send_comm);
}

ncclResult_t braid_accept(void* listen_comm, void** recv_comm,
                          ncclNetDeviceHandle_v8_t** /*recv_dev_comm: no offload*/) {
  *recv_comm = nullptr;
  auto* l = static_cast<Listen*>(listen_comm);
  Pending*& p = l->pending;
  auto fail = [&](ncclResult_t code, const char* why) {
    if (why != nullptr) WARN("accept: %s", why);
    drop_pending(p);
    p = nullptr;
    return code;
  };
  if (p == nullptr) {
    const int fd = accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
        return ncclSuccess;
      WARN("accept: %s", std::strerror(errno));
      return ncclSystemError;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    p = new Pending;
    p->comm = create_comm(Kind::kRecv);
    if (p->comm == nullptr) {
      close(fd);
      return fail(ncclSystemError, nullptr);
    }
    p->comm->fd = fd;
    p->mine = info_of(p->comm);
    p->stage = 1;
  }
  Comm* c = p->comm;
  if (p->stage == 1) {  // the sender's QP in: connect ours
    const int r = recv_some(c->fd, &p->theirs, sizeof p->theirs, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the connecting peer closed the connection");
    if (r == 0) return ncclSuccess;
    if (const ncclResult_t e = connect_qp(c, p->theirs); e != ncclSuccess) return fail(e, nullptr);
    p->stage = 2;
    p->off = 0;
  }
  if (p->stage == 2) {
    const int r = send_some(c->fd, &p->mine, sizeof p->mine, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the connecting peer closed the connection");
    if (r == 0) return ncclSuccess;
    p->stage = 3;
    p->off = 0;
  }
  if (p->stage == 3) {  // its QP is ready for our descriptors
    uint8_t ready = 0;
    const int r = recv_some(c->fd, &ready, 1, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the connecting peer closed the connection");
    if (r == 0) return ncclSuccess;
  }
  *recv_comm = c;
  delete p;
  p = nullptr;
  return ncclSuccess;
}

ncclResult_t braid_reg_mr(void* /*comm*/, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  if (type != NCCL_PTR_HOST) {
    WARN("regMr: only host memory (NCCL_PTR_HOST) is supported, not type %d", type);
    return ncclInvalidArgument;
  }
  braid_mr* mr =
      braid_reg_mr(g_dev.pd, data, size,
                   BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_READ);
  if (mr == nullptr) {
    WARN("regMr %p + %zu: %s", data, size, braid_last_error());
    return ncclSystemError;
  }
  *mhandle = mr;
  return ncclSuccess;
}

ncclResult_t braid_reg_mr_v7(void* comm, void* data, int size, int type, void** mhandle) {
  if (size < 0) {
    *mhandle = nullptr;
    WARN("regMr: negative size %d", size);
    return ncclInvalidArgument;
  }
  return braid_reg_mr(comm, data, static_cast<size_t>(size), type, mhandle);
}

ncclResult_t braid_reg_mr_dmabuf(void* /*comm*/, void* /*data*/, size_t /*size*/, int /*type*/,
                                 uint64_t /*offset*/, int /*fd*/, void** mhandle) {
  *mhandle = nullptr;
  WARN("regMrDmaBuf: DMA-BUF registration is not supported (host memory only)");
  return ncclInternalError;
}

ncclResult_t braid_dereg_mr(void* /*comm*/, void* mhandle) {
  if (mhandle != nullptr) braid_dereg_mr(static_cast<braid_mr*>(mhandle));
  return ncclSuccess;
}

ncclResult_t isend_common(void* send_comm, void* data, uint64_t size, int tag, void* mhandle,
                          void** request) {
  *request = nullptr;
  auto* c = static_cast<Comm*>(send_comm);
  if (c->failed != ncclSuccess) return c->failed;
  const uint32_t slot = c->send_seq % kSlots;
  if (!c->have[slot] || c->got[slot].seq != c->send_seq) {
    if (const ncclResult_t r = progress(c); r != ncclSuccess) return r;
    if (!c->have[slot] || c->got[slot].seq != c->send_seq) {
      if (!peer_closed(c)) return ncclSuccess;  // not posted yet: NCCL calls again
      // What arrived before it closed counts.
      if (const ncclResult_t r = progress(c); r != ncclSuccess) return r;
      if (!c->have[slot] || c->got[slot].seq != c->send_seq) return peer_gone(c);
    }
  }
  const Descriptor& d = c->got[slot];
  int idx = -1;
  for (uint32_t i = 0; i < d.n; ++i) {
    if (d.tag[i] == tag && (c->sent_mask & (1u << i)) == 0) {
      idx = static_cast<int>(i);
      break;
    }
  }
  // No buffer of the receiver's current irecv has this tag (yet): the
  // sender is a step ahead (a grouped receive whose other sends are still
  // to come). As NCCL's own IB transport: no request, NCCL calls again.
  if (idx < 0) return ncclSuccess;
  if (size > d.size[idx]) {
    char why[128];
    std::snprintf(why, sizeof why, "isend: %llu bytes for a %llu-byte receive buffer (tag %d)",
                  static_cast<unsigned long long>(size),
                  static_cast<unsigned long long>(d.size[idx]), tag);
    return fail_comm(c, ncclInvalidArgument, why);
  }
  if (size > 0 && mhandle == nullptr) return fail_comm(c, ncclInvalidArgument, "isend: no mhandle");
  Request* r = new_request(c, 1);
  if (r == nullptr) return ncclSuccess;  // all in flight: NCCL calls again
  braid_sge sge{reinterpret_cast<uintptr_t>(data), static_cast<uint32_t>(size),
                size > 0 ? static_cast<braid_mr*>(mhandle)->lkey : 0};
  braid_send_wr wr{};
  wr.wr_id = reinterpret_cast<uintptr_t>(r);
  wr.sg_list = size > 0 ? &sge : nullptr;
  wr.num_sge = size > 0 ? 1 : 0;
  wr.opcode = BRAID_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = BRAID_SEND_SIGNALED;
  wr.imm_data = htonl((slot << 3) | static_cast<uint32_t>(idx));
  wr.rdma.remote_addr = d.addr[idx];
  wr.rdma.rkey = d.rkey[idx];
  braid_send_wr* bad = nullptr;
  if (const int err = braid_post_send(c->qp, &wr, &bad)) {
    r->used = false;
    if (err == ENOMEM) return ncclSuccess;  // the send queue is full: later
    char why[96];
    std::snprintf(why, sizeof why, "isend: posting the write failed: %s", std::strerror(err));
    return fail_comm(c, ncclSystemError, why);
  }
  r->pending = 1;
  r->sizes[0] = size;
  c->sent_mask |= 1u << idx;
  if (std::popcount(c->sent_mask) == static_cast<int>(d.n)) {
    c->sent_mask = 0;
    c->have[slot] = false;
    ++c->send_seq;
  }
  *request = r;
  return ncclSuccess;
}

ncclResult_t braid_isend_v8(void* send_comm, void* data, int size, int tag, void* mhandle,
                            void** request) {
  if (size < 0) {
    *request = nullptr;
    WARN("isend: negative size %d", size);
    return ncclInvalidArgument;
  }
  return isend_common(send_comm, data, static_cast<uint64_t>(size), tag, mhandle, request);
}
ncclResult_t braid_isend_v10(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                             void* /*phandle*/, void** request) {
  if (size > 0x7fffffff) {
    *request = nullptr;
    WARN("isend: %zu bytes is more than a Braid message carries (2^31 - 1)", size);
    return ncclInvalidArgument;
  }
  return isend_common(send_comm, data, size, tag, mhandle, request);
}

template <typename Size>
ncclResult_t irecv_common(void* recv_comm, int n, void** data, const Size* sizes, const int* tags,
                          void** mhandles, void** request) {
  *request = nullptr;
  auto* c = static_cast<Comm*>(recv_comm);
  if (c->failed != ncclSuccess) return c->failed;
  if (n < 1 || n > kMaxRecvs) {
    WARN("irecv: %d buffers (1 to %d)", n, kMaxRecvs);
    return ncclInvalidArgument;
  }
  const uint32_t slot = c->recv_seq % kSlots;
  if (c->by_slot[slot] != nullptr) return ncclSuccess;  // 32 in flight already
  Request* r = new_request(c, n);
  if (r == nullptr) return ncclSuccess;
  Descriptor& d = c->bufs[slot];
  d = Descriptor{};
  d.seq = c->recv_seq;
  d.n = static_cast<uint32_t>(n);
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0 || static_cast<uint64_t>(sizes[i]) > 0x7fffffffu ||
        (sizes[i] > 0 && mhandles[i] == nullptr)) {
      r->used = false;
      WARN("irecv: buffer %d: size %lld without a registration, or too large", i,
           static_cast<long long>(sizes[i]));
      return ncclInvalidArgument;
    }
    d.addr[i] = reinterpret_cast<uintptr_t>(data[i]);
    d.size[i] = static_cast<uint64_t>(sizes[i]);
    d.rkey[i] = mhandles[i] != nullptr ? static_cast<braid_mr*>(mhandles[i])->rkey : 0;
    d.tag[i] = tags[i];
  }
  // One zero-length receive per buffer (each WRITE_WITH_IMM takes one),
  // then the descriptor.
  braid_recv_wr rwr[kMaxRecvs]{};
  for (int i = 0; i < n; ++i) {
    rwr[i].wr_id = kWrDataRecv;
    rwr[i].next = i + 1 < n ? &rwr[i + 1] : nullptr;
  }
  braid_recv_wr* rbad = nullptr;
  if (const int err = braid_post_recv(c->qp, rwr, &rbad)) {
    r->used = false;
    char why[96];
    std::snprintf(why, sizeof why, "irecv: posting receives failed: %s", std::strerror(err));
    return fail_comm(c, ncclSystemError, why);
  }
  braid_sge sge{reinterpret_cast<uintptr_t>(&d), sizeof d, c->bufs_mr->lkey};
  braid_send_wr wr{};
  wr.wr_id = kWrDescriptorSend;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = BRAID_WR_SEND;
  wr.send_flags = BRAID_SEND_SIGNALED;
  braid_send_wr* bad = nullptr;
  if (const int err = braid_post_send(c->qp, &wr, &bad)) {
    r->used = false;
    char why[96];
    std::snprintf(why, sizeof why, "irecv: sending the descriptor failed: %s", std::strerror(err));
    return fail_comm(c, ncclSystemError, why);
  }
  r->pending = n;
  c->by_slot[slot] = r;
  ++c->recv_seq;
  *request = r;
  return ncclSuccess;
}

ncclResult_t braid_irecv_v8(void* recv_comm, int n, void** data, int* sizes, int* tags,
                            void** mhandles, void** request) {
  return irecv_common(recv_comm, n, data, sizes, tags, mhandles, request);
}
ncclResult_t braid_irecv_v10(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                             void** mhandles, void** /*phandles*/, void** request) {
  return irecv_common(recv_comm, n, data, sizes, tags, mhandles, request);
}

ncclResult_t braid_iflush(void* /*recv_comm*/, int /*n*/, void** /*data*/, int* /*sizes*/,
                          void** /*mhandles*/, void** request) {
  *request = nullptr;  // host memory: the data is visible when the receive completes
  return ncclSuccess;
}

ncclResult_t braid_test(void* request, int* done, int* sizes) {
  *done = 0;
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || !r->used) {
    WARN("test: not a request in flight");
    return ncclInvalidArgument;
  }
  Comm* c = r->comm;
  if (r->pending > 0) {
    if (const ncclResult_t e = progress(c); e != ncclSuccess) return e;
    if (r->pending > 0) {
      if (!peer_closed(c)) return ncclSuccess;
      // What arrived before it closed counts.
      if (const ncclResult_t e = progress(c); e != ncclSuccess) return e;
      if (r->pending > 0) return peer_gone(c);
    }
  }
  *done = 1;
  if (sizes != nullptr) {
    for (int i = 0; i < r->n; ++i) sizes[i] = static_cast<int>(r->sizes[i]);
  }
  r->used = false;
  return ncclSuccess;
}

ncclResult_t braid_close_comm(void* comm) {
  destroy_comm(static_cast<Comm*>(comm));
  return ncclSuccess;
}

ncclResult_t braid_close_listen(void* listen_comm) {
  auto* l = static_cast<Listen*>(listen_comm);
  if (l == nullptr) return ncclSuccess;
  drop_pending(l->pending);
  if (l->fd >= 0) close(l->fd);
  delete l;
  return ncclSuccess;
}

ncclResult_t braid_init_v8(ncclDebugLogger_t logger) {
  return init_common(logger);
}
ncclResult_t braid_init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t /*profiler*/) {
  return init_common(logger);
}

ncclResult_t braid_make_vdevice(int* d, ncclNetVDeviceProps_v10_t* props) {
  // A virtual NIC of one device is that device; Braid has one per process.
  if (props == nullptr || props->ndevs != 1 || check_dev(props->devs[0]) != ncclSuccess) {
    WARN("makeVDevice: only a virtual device of the one device 0");
    return ncclInvalidArgument;
  }
  *d = props->devs[0];
  return ncclSuccess;
}

}  // namespace

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

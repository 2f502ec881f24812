// The NCCL plugin's parts (plugin.cc says what the plugin is): the
// device (device.cc), comms and their completions (comm.cc), the
// connection set-up over TCP (setup.cc) and the transfers (transfer.cc).
#pragma once

#include <time.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "braid/verbs.h"
#include "nccl/nccl_net.h"

namespace braid::nccl {

constexpr int kMaxRecvs = 8;                             // buffers of one grouped receive
constexpr int kSlots = NCCL_NET_MAX_REQUESTS;            // requests in flight per comm
constexpr uint64_t kHandleMagic = 0x4252414944'4e43ull;  // "BRAIDNC"
constexpr uint32_t kInfoMagic = 0x42524e32;              // "BRN2": with the nonce
constexpr int kCqDepth = 1024;
constexpr uint32_t kSendDepth = 2 * kSlots;
constexpr uint32_t kRecvDepth = kSlots * kMaxRecvs + kSlots;

extern ncclDebugLogger_t g_logger;
__attribute__((format(printf, 4, 5))) void log_line(ncclDebugLogLevel level, const char* file,
                                                    int line, const char* fmt, ...);
#define BRAID_NCCL_LOG(level, ...) log_line(level, __FILE__, __LINE__, __VA_ARGS__)
#define WARN(...) BRAID_NCCL_LOG(NCCL_LOG_WARN, __VA_ARGS__)
#define INFO(...) BRAID_NCCL_LOG(NCCL_LOG_INFO, __VA_ARGS__)

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
extern bool g_init_done;
extern ncclResult_t g_init_result;
extern Device g_dev;

ncclResult_t check_dev(int dev);

// ---- What the connection set-up exchanges over TCP -------------------

struct Pending;  // setup.cc
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
void log_qp_stats(const Comm* c, ncclDebugLogLevel level);
// The comm fails (once: the first reason is kept and logged); returns its code.
ncclResult_t fail_comm(Comm* c, ncclResult_t code, const char* why);
void destroy_comm(Comm* c);
// A comm with its CQ, its QP in INIT and (sender) its descriptor buffers
// posted; nullptr after a warning.
Comm* create_comm(Kind kind);
// What this end's QP tells the peer.
PeerInfo info_of(const Comm* c);
// RTR then RTS towards the peer `p` describes.
ncclResult_t connect_qp(Comm* c, const PeerInfo& p);
// Polls the comm's CQ (which drives Braid's engine).
ncclResult_t progress(Comm* c);
// Every 10 ms of waiting: whether the peer's end of the TCP connection is
// closed (its process exited).
bool peer_closed(Comm* c);
ncclResult_t peer_gone(Comm* c);
Request* new_request(Comm* c, int n);

// The interface (the plugin's tables in plugin.cc).
ncclResult_t braid_init_v8(ncclDebugLogger_t logger);
ncclResult_t braid_init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler);
ncclResult_t braid_devices(int* ndev);
ncclResult_t braid_get_properties_v7(int dev, ncclNetProperties_v7_t* props);
ncclResult_t braid_get_properties_v8(int dev, ncclNetProperties_v8_t* props);
ncclResult_t braid_get_properties_v10(int dev, ncclNetProperties_v10_t* props);
ncclResult_t braid_make_vdevice(int* d, ncclNetVDeviceProps_v10_t* props);
ncclResult_t braid_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t braid_reg_mr_v7(void* comm, void* data, int size, int type, void** mhandle);
ncclResult_t braid_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset,
                                 int fd, void** mhandle);
ncclResult_t braid_dereg_mr(void* comm, void* mhandle);
ncclResult_t braid_listen(int dev, void* opaque_handle, void** listen_comm);
ncclResult_t braid_connect_v8(int dev, void* handle, void** send_comm,
                              ncclNetDeviceHandle_v8_t** send_dev_comm);
ncclResult_t braid_connect_v10(int dev, ncclNetCommConfig_v10_t* config, void* handle,
                               void** send_comm, ncclNetDeviceHandle_v10_t** send_dev_comm);
ncclResult_t braid_accept(void* listen_comm, void** recv_comm,
                          ncclNetDeviceHandle_v8_t** recv_dev_comm);
ncclResult_t braid_close_listen(void* listen_comm);
ncclResult_t braid_isend_v8(void* send_comm, void* data, int size, int tag, void* mhandle,
                            void** request);
ncclResult_t braid_isend_v10(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                             void* phandle, void** request);
ncclResult_t braid_irecv_v8(void* recv_comm, int n, void** data, int* sizes, int* tags,
                            void** mhandles, void** request);
ncclResult_t braid_irecv_v10(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                             void** mhandles, void** phandles, void** request);
ncclResult_t braid_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                          void** request);
ncclResult_t braid_test(void* request, int* done, int* sizes);
ncclResult_t braid_close_comm(void* comm);

}  // namespace braid::nccl

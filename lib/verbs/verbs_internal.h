// The objects behind Braid's verbs C API (include/braid/verbs.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/verbs.h"
#include "core/completion_queue.h"
#include "core/connection.h"
#include "engine/engine.h"
#include "idle_yield.h"

struct braid_context {
  braid_device_config config{};
  std::string port_spec, ipv4, gateway, neighbors, eal_args;  // owned copies
  std::string stats_name;                                     // live statistics object ("": none)
  uint32_t ip = 0;
  bool crc = false;  // a CRC-32C trailer on what we send (config.crc resolved)
  std::unique_ptr<braid::Engine> engine;
  // Run-to-completion by default; with a progress thread every entry point
  // takes `lock`.
  bool threaded = false;
  std::mutex lock;
  std::thread progress;
  std::atomic<bool> stop{false};
  // Calls the application made (threaded mode): the progress thread sees it
  // move while the application drives the device. A counter, not a clock:
  // reading the clock on every call cost a fifth of a busy client's time.
  std::atomic<uint64_t> calls{0};
  // CQs armed for an event (req_notify_cq, not fired yet): the application
  // waits for the device, so the thread drives it whatever `calls` says.
  std::atomic<int> armed{0};
  // The thread's sleep while the application calls; arming a CQ (and stop)
  // wakes it.
  std::mutex wake_lock;
  std::condition_variable wake;
  uint32_t next_pd = 1;
  std::vector<bool> qpn_used = std::vector<bool>(65536, false);
  uint32_t next_qpn = 1;  // where the search for a free QP number starts
  std::vector<braid_cq*> cqs;
  std::vector<braid_qp*> qps;
  braid::IdleYield idle;  // config.idle_yield: application calls that found no work
  int open_objects = 0;   // PDs, CQs, QPs, MRs, channels not yet destroyed
};

namespace braid {
// Live statistics show this many QPs of a device (the rest are counted).
inline constexpr uint32_t kStatsMaxQps = 1024;
void set_last_error(const std::string& why);
void start_progress_thread(braid_context* c);
void stop_progress_thread(braid_context* c);
// At exit, before the EAL goes: a program may end without closing its
// device, and its progress thread must not poll freed DPDK memory.
void stop_all_progress_threads();
}  // namespace braid

struct braid_pd {
  braid_context* context;
  uint32_t id;
  int users = 0;  // MRs and QPs on it: it cannot go before them
};

struct braid_comp_channel {
  braid_context* context;
  int fd;  // eventfd
  std::deque<braid_cq*> fired;
};

struct braid_cq {
  braid_context* context;
  braid::CompletionQueue ring;
  void* cq_context;
  braid_comp_channel* channel;
  bool armed = false;
  // ring.pushed() when armed: as with a NIC, the event is for the next
  // completion, not for one already there when the CQ was armed (which the
  // application polls after arming). An event for an old one could still be
  // pending when the CQ is destroyed; Gloo's device thread then handles it
  // for a freed object.
  uint64_t armed_at = 0;
  unsigned events = 0, acked = 0;
  int users = 0;  // QPs using it
  braid_cq(braid_context* c, uint32_t n, void* ctx, braid_comp_channel* ch)
      : context(c), ring(n), cq_context(ctx), channel(ch) {}
};

struct braid_qp {
  braid_context* context;
  braid_pd* pd;
  braid_cq* send_cq;
  braid_cq* recv_cq;
  void* qp_context;
  uint32_t qp_num;
  braid_qp_state state = BRAID_QPS_RESET;
  braid_qp_init_attr init{};
  braid_qp_attr attr{};
  bool sq_sig_all = false;
  braid::Connection* conn = nullptr;  // from RTR on
  // Receives posted in INIT, before the connection exists.
  std::vector<std::pair<uint64_t, braid::SgList>> early_recvs;
  // Inline data is copied here at post time: one slot per send queue
  // entry, indexed by the request's MSN (a power of two of them, at least
  // max_send_wr, so MSNs of outstanding requests never share one).
  std::vector<uint8_t> inline_buf;
  uint32_t inline_slots = 1;
};

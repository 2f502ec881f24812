// The objects behind Braid's verbs C API (include/braid/verbs.h).
#pragma once

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "braid/verbs.h"
#include "core/completion_queue.h"
#include "core/connection.h"
#include "core/shared_receive_queue.h"
#include "engine/engine.h"
#include "engine/idle_yield.h"

namespace braid {
// One engine of a device, on one queue pair of its port.
struct EngineSlot {
  std::unique_ptr<Engine> engine;
  // Taken by every call that touches this engine, its QPs or its part of a
  // CQ, when the device locks (braid_context::locking).
  std::mutex lock;
  std::thread progress;
  // Calls the application made that drive this engine (threaded mode):
  // its progress thread sees the counter move while the application drives
  // it. A counter, not a clock: reading the clock on every call cost a
  // fifth of a busy client's time.
  std::atomic<uint64_t> calls{0};
  // RC QPs of this engine in RTR that have received nothing yet, with their
  // connection's counts at RTR: the first request raises COMM_EST (changed
  // under this engine's lock; modify_qp and destroy_qp hold every lock).
  struct CommEstWait {
    braid_qp* qp;
    uint64_t data_at_rtr;      // ConnectionStats::data_received
    uint64_t requests_at_rtr;  // QueuePair::requests_received (a shared PDC)
  };
  std::vector<CommEstWait> comm_est;
  // The engine's port_changes() the verbs layer has raised events for.
  uint32_t port_changes_seen = 0;
  // RC QPs of this engine in SQD whose send queue has not drained yet
  // (changed under this engine's lock; modify_qp and destroy_qp hold every
  // lock): each poll looks whether they have (raise_sq_drained).
  std::vector<braid_qp*> sq_draining;
};
}  // namespace braid

struct braid_context {
  braid_device_config config{};
  std::string port_spec, ipv4, gateway, neighbors, eal_args;  // owned copies
  std::string stats_name;                                     // live statistics object ("": none)
  uint32_t ip = 0;
  bool crc = false;                      // a CRC-32C trailer on what we send (config.crc resolved)
  braid::wire::TssSecret auth_secret{};  // config.auth_key, parsed (auth on)
  // Bytes each frame carries besides headers and payload: the TSS header
  // and ICV (auth), the CRC-32C trailer, or none.
  uint32_t trailer_bytes() const {
    return config.auth != BRAID_AUTH_OFF ? braid::wire::kTssOverhead
           : crc                         ? braid::wire::kCrcTrailerSize
                                         : 0;
  }
  // The engines, one per queue pair of the port (config.engines); QP n runs
  // on engine n % engines. With more than one, they share one
  // memory-region table (`memory`, changed only under every engine's lock)
  // and hand each other frames through `group`.
  std::vector<std::unique_ptr<braid::EngineSlot>> slots;
  braid::Engine* engine = nullptr;  // slots[0]'s
  std::unique_ptr<braid::EngineGroup> group;
  std::unique_ptr<braid::MemoryRegionTable> memory;
  // With several engines on a DPDK port: the port, each engine having a
  // queue of it (with one engine, the engine has the port). Its counters
  // sum every queue's, read only under every engine's lock.
  std::unique_ptr<braid::PacketIo> port;
  ~braid_context() {
    if (async_fd >= 0) close(async_fd);
    // Engines go before the group they hand frames through, and queues
    // before the port they belong to.
    for (size_t k = slots.size(); k-- > 0;) slots[k]->engine.reset();
    port.reset();
  }
  // Run-to-completion with one engine by default: no lock is taken. With a
  // progress thread, or several engines, every entry point takes the locks
  // of the engines it touches (in index order when several).
  // Turned on (never off) while other threads may be calling: each guard
  // remembers whether it locked.
  std::atomic<bool> locking{false};
  // The engines' credit pacers share their next grant's time (one port).
  std::atomic<braid::TimeNs> credit_next_at{0};
  // Progress threads run: started once (from any thread) and stopped once,
  // under thread_lock.
  std::atomic<bool> threaded{false};
  std::mutex thread_lock;
  std::atomic<bool> stop{false};
  // Completion events: CQs' armed state and channels' fired lists, changed
  // by the application and by whichever engine completed into a CQ.
  std::mutex event_lock;
  // CQs armed for an event (req_notify_cq, not fired yet): the application
  // waits for the device, so the threads drive it whatever `calls` says.
  std::atomic<int> armed{0};
  // The same for CQs of the device's CM QP (BRAID_QPT_CM: librdmacm's service
  // thread keeps its CQ armed for good). They fire as the others do, but
  // say nothing about the application: the threads still sleep while it
  // calls, and do not race it for the engines.
  std::atomic<int> armed_internal{0};
  // The threads' sleep while the application calls; arming a CQ (and stop)
  // wakes them.
  std::mutex wake_lock;
  std::condition_variable wake;
  uint32_t next_pd = 1;
  // Holders of each QP number: its QP, and a shared PDC while its peer may
  // still name it (the number the PDC is kept under, a departed QP's). A
  // number is free at 0.
  std::vector<uint8_t> qpn_holds = std::vector<uint8_t>(65536, 0);
  // QP numbers: a counter that goes round 1..65535 (random start:
  // open_device) through a keyed permutation of 1..65535 (qpn_of), so that
  // one QP's number does not tell the next one's, and a number still comes
  // back only after 65534 others. qpn_key 0: the counter itself (tests that
  // choose numbers).
  uint32_t next_qpn = 1;  // where the search for a free QP number starts
  uint64_t qpn_key = 0;
  std::vector<braid_cq*> cqs;
  std::vector<braid_qp*> qps;
  // Shared PDCs (config.pdc_per_peer), by the id they are kept under: the
  // QP numbers of their destroyed QPs that the peer may still name, held
  // (qpn_holds) until the PDC goes.
  std::unordered_map<uint16_t, std::vector<uint32_t>> pdc_held_qpns;
  std::vector<braid_srq*> srqs;
  // Asynchronous events (srq.cc): waiting in `async_events` (the eventfd
  // readable while any does), or handed to `async_handler` as raised.
  std::mutex async_lock;
  std::deque<braid_async_event> async_events;
  int async_fd = -1;  // eventfd, made by the first braid_async_event_fd
  bool async_signalled = false;
  braid_async_handler async_handler = nullptr;
  void* async_arg = nullptr;
  // The port state the last PORT_ACTIVE or PORT_ERR said (at open: the
  // engines' state then), under port_event_lock.
  std::mutex port_event_lock;
  bool port_reported_ok = false;
  // The port as its engines last looked at it: every one's queue of it up.
  bool port_ok() const {
    for (const auto& s : slots)
      if (!s->engine->port_ok()) return false;
    return true;
  }
  int open_objects = 0;  // PDs, CQs, QPs, SRQs, MRs, channels not yet destroyed
  uint16_t engines() const { return static_cast<uint16_t>(slots.size()); }
  uint16_t engine_of(uint32_t qp_num) const { return static_cast<uint16_t>(qp_num % slots.size()); }
};

// Hands an asynchronous event to the context's handler, or queues it
// (srq.cc); any thread, under the engine's lock or not.
void raise_async_event(braid_context* c, const braid_async_event& ev);
// Events waiting in the queue about an object being destroyed go with it
// (any of the three may be null).
void forget_async_events(braid_context* c, const braid_qp* qp, const braid_cq* cq,
                         const braid_srq* srq);
// After engine k's poll (calls.h, progress_locked; k's lock held): COMM_EST
// for its QPs in RTR that received their first request (qp.cc), and
// PORT_ERR / PORT_ACTIVE when the port's state changed (srq.cc).
void raise_comm_est(braid_context* c, uint16_t k);
// The QPs of engine k in SQD whose send queues have drained since: SQ_DRAINED
// for those that asked for it.
void raise_sq_drained(braid_context* c, uint16_t k);
void raise_port_event(braid_context* c, uint16_t k);

namespace braid {
// A permutation of 1..65535 chosen by `key` (0: none): a 4-round Feistel
// network on 16 bits, walked again past 0 until it lands in range.
inline uint32_t qpn_of(uint32_t counter, uint64_t key) {
  if (key == 0) return counter;
  uint32_t v = counter;
  do {
    uint32_t l = v >> 8, r = v & 0xff;
    for (int round = 0; round < 4; ++round) {
      uint64_t x = (uint64_t{r} << 8 | static_cast<uint64_t>(round)) ^ key;
      x *= 0x9e3779b97f4a7c15ull;
      x ^= x >> 29;
      const uint32_t f = static_cast<uint32_t>(x >> 56);
      const uint32_t next_r = l ^ f;
      l = r;
      r = next_r;
    }
    v = l << 8 | r;
  } while (v == 0);
  return v;
}
// Live statistics show this many QPs of a device (the rest are counted).
inline constexpr uint32_t kStatsMaxQps = 1024;
// READs and atomics a QP may have outstanding, and accept from its peer
// (max_qp_init_rd_atom, max_qp_rd_atom; rxe's figure). A NIC's 16 bounds
// small READs by the round trip: 64 B READs ran at 3.8-3.9 Mpps with 16,
// 6.4-6.7 with 64 or 128 (docs/benchmarks.md). Unset at RTR and RTS, a
// QP takes 16 (kDefaultRdAtomic): what it asks for costs its memory.
inline constexpr uint8_t kMaxRdAtomic = 128;
inline constexpr uint8_t kDefaultRdAtomic = 16;
// How long a progress thread holds an ACK asked for at once, so that it
// leaves with the application's answer; every QP's tail-loss probe allows
// for a peer that holds its ACKs this long.
inline constexpr TimeNs kAckHoldNs = 30'000;
void set_last_error(const std::string& why);
// The MAC of the next hop towards peer_ip, for engine k (every engine's
// lock held, or k's alone with wait_us < 0): whichever engine learns it
// first tells k. wait_us < 0: only what is known now (resolution starts).
bool resolve_for(braid_context* c, uint16_t k, uint32_t peer_ip, int wait_us, wire::MacAddr* mac);
void start_progress_thread(braid_context* c);
void stop_progress_thread(braid_context* c);
// At exit, before the EAL goes: a program may end without closing its
// device, and its progress thread must not poll freed DPDK memory.
void stop_all_progress_threads();
// At exit, before the EAL closes the ports (the port opener's
// before_shutdown): the progress threads stop, then each device a program
// left open acknowledges what it received and waits for the answers to its
// closed QPs' CLOSEs, as braid_close_device does (verbs.cc).
void settle_at_exit();
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
  bool signalled = false;  // the eventfd's counter is 1 (else 0)
};

struct braid_cq {
  braid_context* context;
  // One ring per engine that has QPs on this CQ (created with the first),
  // each written only by its engine under its lock: a QP's completions
  // stay in order, and engines never share a ring. With one engine, one.
  std::vector<std::unique_ptr<braid::CompletionQueue>> rings;
  // rings[k] exists: read without a lock (a poll decides whether to wait
  // for engine k's lock), set under every lock.
  std::unique_ptr<std::atomic<bool>[]> has_ring;
  uint32_t cqe;
  std::atomic<uint16_t> next_ring{0};  // where the next poll starts (fairness)
  void* cq_context;
  braid_comp_channel* channel;
  // Under context->event_lock:
  bool armed = false;
  bool internal = false;  // a CQ of the CM QP: counted in armed_internal
  // Per engine, ring.pushed() when armed: as with a NIC, the event is for
  // the next completion, not for one already there when the CQ was armed
  // (which the application polls after arming). An event for an old one
  // could still be pending when the CQ is destroyed; Gloo's device thread
  // then handles it for a freed object.
  std::vector<uint64_t> armed_at;
  unsigned events = 0, acked = 0;
  int users = 0;  // QPs using it
  braid_cq(braid_context* c, uint32_t n, void* ctx, braid_comp_channel* ch)
      : context(c),
        rings(c->engines()),
        has_ring(new std::atomic<bool>[c->engines()]),
        cqe(n),
        cq_context(ctx),
        channel(ch),
        armed_at(c->engines(), 0) {
    for (uint16_t k = 0; k < c->engines(); ++k) has_ring[k].store(false);
    if (c->engines() == 1) {
      rings[0] = std::make_unique<braid::CompletionQueue>(n);
      has_ring[0].store(true);
    }
  }
  // The ring of engine k (created by the first QP of that engine).
  braid::CompletionQueue& ring(uint16_t k) { return *rings[k]; }
};

struct braid_srq {
  braid_context* context;
  braid_pd* pd;  // its receives' buffers are checked against it
  void* srq_context;
  uint32_t max_sge;
  braid::SharedReceiveQueue queue;
  int users = 0;  // QPs taking from it
  braid_srq(braid_context* c, braid_pd* p, void* ctx, uint32_t sge, uint32_t max_wr)
      : context(c), pd(p), srq_context(ctx), max_sge(sge), queue(max_wr) {}
};

struct braid_ah {
  braid_context* context;
  braid_pd* pd;
  braid_ah_attr attr;
  uint32_t ip = 0;  // the peer's address (host order)
  braid::wire::MacAddr mac{};
  bool resolved = false;  // mac is known
};

struct braid_qp {
  braid_context* context;
  uint16_t engine = 0;  // context->engine_of(qp_num)
  braid_pd* pd;
  braid_cq* send_cq;
  braid_cq* recv_cq;
  braid_srq* srq = nullptr;  // its receives', when it has one
  void* qp_context;
  bool destroying = false;  // braid_destroy_qp: its flush raises no event
  uint32_t qp_num;
  braid_qp_state state = BRAID_QPS_RESET;
  braid_qp_init_attr init{};
  braid_qp_attr attr{};
  bool sq_sig_all = false;
  bool sqd_notify = false;            // SQ_DRAINED asked for with the move to SQD
  braid::Connection* conn = nullptr;  // from RTR on
  // Its queue pair's slot on conn: 0 on a connection of its own; on a PDC
  // the device's QPs to one peer share (config.pdc_per_peer), any.
  uint16_t slot = 0;
  braid::QueuePair* core = nullptr;  // &conn->queue_pair(slot)
  // A UD QP's datagram queue pair on its engine's endpoint, from INIT on.
  braid::DatagramQueuePair* ud = nullptr;
  bool is_ud() const { return init.qp_type == BRAID_QPT_UD; }
  bool in_error() const {
    return conn != nullptr && (conn->state() == braid::ConnectionState::kError ||
                               core->state() == braid::ConnectionState::kError);
  }
  uint32_t outstanding_sends() const {
    return ud != nullptr ? ud->outstanding_sends() : core->outstanding_sends();
  }
  // Receives posted in INIT, before the connection exists.
  std::vector<std::pair<uint64_t, braid::SgList>> early_recvs;
  // Inline data is copied here at post time: one slot per send queue
  // entry, indexed by the request's MSN (a power of two of them, at least
  // max_send_wr, so MSNs of outstanding requests never share one).
  std::vector<uint8_t> inline_buf;
  uint32_t inline_slots = 1;
  // The request post_send builds (under the engine's guard): every field a
  // post uses is written, so it is not cleared per post (clearing it was 5%
  // of a 64 B WRITE's sender time).
  braid::SendRequest post_scratch;
};

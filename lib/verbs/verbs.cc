// Braid's verbs C API over the engine and the protocol core.
#include "braid/verbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"

namespace {

thread_local std::string g_last_error;

int fail(int err, std::string why) {
  g_last_error = std::move(why);
  return err;
}

template <typename T>
T* fail_null(int err, std::string why) {
  g_last_error = std::move(why);
  errno = err;
  return nullptr;
}

uint64_t steady_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// A call that drives an engine itself (poll, post, progress) tells the
// engine's progress thread the application is active; other calls
// (queries, registrations, modify) do not: an application that only queries
// while it waits for a WRITE would otherwise starve the thread.
enum class Drives : bool { kNo, kYes };

// Every engine's lock, in index order: calls that change what all engines
// share (memory regions, the lists of QPs and CQs) or read all of them.
// Taken only when the device locks (a progress thread, several engines).
class Guard {
 public:
  explicit Guard(braid_context* c) : c_(c), locked_(c->locking.load()) {
    if (!locked_) return;
    for (auto& s : c_->slots) s->lock.lock();
  }
  ~Guard() {
    if (!locked_) return;
    for (size_t i = c_->slots.size(); i-- > 0;) c_->slots[i]->lock.unlock();
  }

 private:
  braid_context* c_;
  bool locked_;
};

// One engine's lock: calls about one QP, or one engine's part of a CQ.
class EngineGuard {
 public:
  // kTry: only if no other thread holds it (owns() says).
  enum class Wait : bool { kBlock, kTry };
  EngineGuard(braid_context* c, uint16_t k, Drives drives = Drives::kNo, Wait wait = Wait::kBlock)
      : s_(c->locking ? c->slots[k].get() : nullptr) {
    if (s_ == nullptr) return;
    if (wait == Wait::kTry) {
      if (!s_->lock.try_lock()) {
        s_ = nullptr;
        owns_ = false;
        return;
      }
    } else {
      s_->lock.lock();
    }
    // Only the lock holder writes it: no read-modify-write needed.
    if (drives == Drives::kYes) {
      s_->calls.store(s_->calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
  }
  ~EngineGuard() {
    if (s_ != nullptr) s_->lock.unlock();
  }
  bool owns() const { return owns_; }

 private:
  braid::EngineSlot* s_;
  bool owns_ = true;  // (without locking, the caller is the only thread)
};

// config.idle_yield for the calling thread: calls in a row that found no
// work (outside every lock: the thread may give its core away).
void idle_pass(const braid_context* c, bool worked) {
  const uint32_t after = c->config.idle_yield;
  if (after == 0) return;  // the default: no thread-local access (a call in a shared library)
  thread_local braid::IdleYield idle;
  idle.pass(worked, after);
}

// A completion channel's fd is readable exactly while an event is pending,
// as rdma-core's: the eventfd's counter is 1 while `fired` holds a CQ and 0
// when it is empty. (Both change under the device's event_lock.)
void channel_push(braid_comp_channel* ch, braid_cq* cq) {
  ch->fired.push_back(cq);
  if (ch->signalled) return;
  const uint64_t one = 1;
  ch->signalled = write(ch->fd, &one, sizeof(one)) == sizeof(one);
}

// The counter is cleared with the read alone, no syscall before it: a
// thread that returns from a syscall may give the core to the thread
// waiting in poll(2) on the fd, which would find it still readable and
// then no event (a destroy_cq dropped it) -- Gloo aborts on that EAGAIN;
// it did 7 runs in 100 under load while this poll(2)ed before reading.
void channel_drain_if_empty(braid_comp_channel* ch) {
  if (!ch->fired.empty() || !ch->signalled) return;
  uint64_t v;
  // The counter is 1: the read does not block, even on a blocking fd.
  if (read(ch->fd, &v, sizeof(v)) == sizeof(v)) ch->signalled = false;
}

// After engine k completed: fires the armed CQs it completed into (under
// k's lock, which keeps the list of CQs and k's rings still).
void signal_armed_cqs(braid_context* c, uint16_t k) {
  if (c->armed.load(std::memory_order_relaxed) == 0) return;  // most polls: none armed
  std::lock_guard<std::mutex> e(c->event_lock);
  for (braid_cq* cq : c->cqs) {
    const braid::CompletionQueue* r = cq->rings[k].get();
    if (!cq->armed || cq->channel == nullptr || r == nullptr || r->pushed() == cq->armed_at[k]) {
      continue;
    }
    cq->armed = false;
    c->armed.fetch_sub(1, std::memory_order_relaxed);
    channel_push(cq->channel, cq);
  }
}

int progress_locked(braid_context* c, uint16_t k, braid::TimeNs ack_hold_ns = 0) {
  const int n = static_cast<int>(c->slots[k]->engine->poll(ack_hold_ns));
  signal_armed_cqs(c, k);
  return n;
}

// Each engine's progress thread drives it while the application does not.
// While the application calls into the engine (polling a CQ, posting) it
// drives the engine itself and the thread sleeps instead of fighting it for
// the lock and the core. Once the application has been away for a while
// (blocked on a socket, or spinning on memory for a WRITE to land, as
// perftest's latency tests do) the thread polls as long as there is work,
// and yields the core after a run of fruitless polls.
//
// Measured on one shared core (ib_write_lat over memif, 2 bytes): a
// real-time thread that naps when idle instead (SCHED_FIFO; a nap costs
// 15 us or more here) answered large messages sooner (64 KiB: 0.2 ms, not
// 2 ms) but made small ones worse (typical 1.4 -> 11..160 us), the
// figure perftest reports; the fair scheduler's time slices are what a
// large message waits for now.
void progress_loop(braid_context* c, uint16_t k) {
  // How often the thread looks whether the application still calls. Each
  // timed wake costs 15 us or more on these VMs: looking every 200 us took
  // a tenth of a busy ib_write_bw client's rate.
  constexpr auto kAppActiveSleep = std::chrono::microseconds(1000);
  constexpr uint32_t kIdlePolls = 32;  // fruitless polls before yielding
  // Data the thread placed is often answered by the application (a
  // ping-pong spinning on memory) once it gets the core: the ACK waits that
  // long to leave with the answer. Sent alone, it lets the peer see its
  // completion first and spin for the answer, with only its own thread to
  // fetch it. An application away for longer (a WRITE target blocked on a
  // socket) answers nothing: its ACKs go at once. Nor does one that waits
  // for completion events (it answers after its wake-up, if at all): a
  // held ACK there only delays its peer's send completions, which
  // collective libraries expect about a round trip after the data lands
  // (Gloo destroys a buffer once the peer's next message is in, and aborts
  // if its own send has not completed by then). Its ACKs leave in the poll
  // that received the data.

  constexpr braid::TimeNs kAckHoldNs = braid::kAckHoldNs;
  constexpr uint64_t kAnswerWindowNs = 2'000'000;
  braid::EngineSlot& slot = *c->slots[k];
  slot.engine->io().attach_thread();
  uint64_t seen = slot.calls.load(std::memory_order_relaxed);
  uint64_t last_active_ns = steady_ns();
  bool may_answer = true;
  braid::IdleYield idle(kIdlePolls);
  uint32_t polls = 0;
  while (!c->stop.load(std::memory_order_relaxed)) {
    const uint64_t calls = slot.calls.load(std::memory_order_relaxed);
    auto waits_for_events = [c] { return c->armed.load(std::memory_order_relaxed) > 0; };
    if (calls != seen && !waits_for_events()) {  // the application called since the last look
      seen = calls;
      {
        std::unique_lock<std::mutex> w(c->wake_lock);
        c->wake.wait_for(w, kAppActiveSleep, [&] {
          return waits_for_events() || c->stop.load(std::memory_order_relaxed);
        });
      }
      last_active_ns = steady_ns();
      may_answer = true;
      continue;
    }
    // The clock is read once in a while: a poll that finds nothing costs
    // little more than a clock read.
    if ((++polls & 63) == 0) may_answer = steady_ns() - last_active_ns < kAnswerWindowNs;
    int moved = 0;
    {
      std::unique_lock<std::mutex> g(slot.lock, std::try_to_lock);
      if (g.owns_lock()) {
        // ACKs of what woke an event waiter leave before it is woken: once
        // it runs, this thread may wait a time slice for the core.
        const braid::TimeNs hold = waits_for_events() ? braid::Engine::kAckNow
                                   : may_answer       ? kAckHoldNs
                                                      : 0;
        moved = progress_locked(c, k, hold);
      }
    }
    idle.pass(moved > 0);
  }
  slot.engine->io().detach_thread();
}

// Local key check for a work request's buffers: every SGE must lie inside a
// region of the QP's PD with the access the operation needs.
bool to_sgl(braid_context* c, braid_pd* pd, const braid_sge* sges, int n, uint32_t need,
            braid::SgList* out) {
  if (n < 0 || static_cast<uint32_t>(n) > braid::kMaxSge) return false;
  out->num = 0;
  for (int i = 0; i < n; ++i) {
    uint8_t* p = nullptr;
    if (sges[i].length > 0 && c->memory->resolve(sges[i].lkey, sges[i].addr, sges[i].length, need,
                                                 pd->id, &p) != braid::AccessError::kNone) {
      return false;
    }
    out->sge[out->num++] = braid::Sge{p, sges[i].length, sges[i].lkey};
  }
  return true;
}

// The errno of a refused post, with the reason for braid_last_error().
int post_error(braid::PostError e, const char* what) {
  switch (e) {
    case braid::PostError::kOk:
      return 0;
    case braid::PostError::kQueueFull:
      return fail(ENOMEM, std::string(what) + ": queue full");
    case braid::PostError::kInvalid:
      return fail(EINVAL, std::string(what) + ": invalid work request");
    case braid::PostError::kConnectionError:
      break;
  }
  return fail(EINVAL, std::string(what) + ": QP in error");
}

// The remote operations a QP's access flags allow, as the core names them.
uint32_t remote_access_of(unsigned int flags) {
  return ((flags & BRAID_ACCESS_REMOTE_WRITE) ? braid::kAccessRemoteWrite : 0u) |
         ((flags & BRAID_ACCESS_REMOTE_READ) ? braid::kAccessRemoteRead : 0u);
}

// InfiniBand's RNR timer encoding (min_rnr_timer), in nanoseconds.
braid::TimeNs rnr_delay_ns(uint8_t code) {
  static const uint32_t kUs[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                   160,    240,   320,   480,    640,    960,    1280,   1920,
                                   2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                   40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return braid::TimeNs{kUs[code & 31]} * 1000;
}

// A send work request as the connection takes it, or the errno that
// refuses it. `commit` false only checks: inline data is not copied.
int prepare_send(braid_qp* qp, const braid_send_wr* wr, bool commit, braid::SendRequest* req) {
  req->wr_id = wr->wr_id;
  req->signaled = qp->sq_sig_all || (wr->send_flags & BRAID_SEND_SIGNALED);
  req->remote_addr = wr->rdma.remote_addr;
  req->rkey = wr->rdma.rkey;
  req->imm_data = ntohl(wr->imm_data);
  uint32_t need = 0;
  // Read as an int: a C caller may pass any value, and an out-of-range
  // enum must not be loaded as one.
  int opcode;
  std::memcpy(&opcode, &wr->opcode, sizeof(opcode));
  switch (opcode) {
    case BRAID_WR_RDMA_WRITE:
      req->opcode = braid::Opcode::kWrite;
      break;
    case BRAID_WR_RDMA_WRITE_WITH_IMM:
      req->opcode = braid::Opcode::kWriteImm;
      break;
    case BRAID_WR_SEND:
      req->opcode = braid::Opcode::kSend;
      break;
    case BRAID_WR_SEND_WITH_IMM:
      req->opcode = braid::Opcode::kSendImm;
      break;
    case BRAID_WR_RDMA_READ:
      req->opcode = braid::Opcode::kRead;
      need = braid::kAccessLocalWrite;
      break;
    default:
      return fail(EINVAL, "post_send: opcode not supported");
  }
  if (qp->state != BRAID_QPS_RTS) return fail(EINVAL, "post_send: QP not in RTS");
  req->fence = (wr->send_flags & BRAID_SEND_FENCE) != 0;
  // The QP's own depth, not the core's (rounded up to a power of two).
  if (qp->conn->outstanding_sends() >= qp->init.cap.max_send_wr) {
    return fail(ENOMEM, "post_send: send queue full (max_send_wr outstanding)");
  }
  if ((wr->send_flags & BRAID_SEND_INLINE) && req->opcode != braid::Opcode::kRead) {
    // Copy now: the application may reuse its buffer when this returns.
    uint64_t total = 0;
    for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
    if (wr->num_sge < 0 || total > qp->init.cap.max_inline_data) {
      return fail(EINVAL, "post_send: inline data larger than max_inline_data");
    }
    if (!commit) return 0;
    // The slot belongs to the work request's own send queue entry (its MSN):
    // it is free until that entry completes, and a request refused after
    // the copy leaves no other request's bytes changed.
    const size_t cap = qp->init.cap.max_inline_data;
    uint8_t* slot = qp->inline_buf.data() + (qp->conn->next_msn() & (qp->inline_slots - 1)) * cap;
    size_t off = 0;
    for (int i = 0; i < wr->num_sge; ++i) {
      if (wr->sg_list[i].length == 0) continue;  // its address may be anything
      std::memcpy(slot + off, reinterpret_cast<const void*>(wr->sg_list[i].addr),
                  wr->sg_list[i].length);
      off += wr->sg_list[i].length;
    }
    req->local.num = 1;
    req->local.sge[0] = braid::Sge{slot, static_cast<uint32_t>(off)};
    return 0;
  }
  if (!to_sgl(qp->context, qp->pd, wr->sg_list, wr->num_sge, need, &req->local)) {
    return fail(EINVAL, "post_send: a buffer is outside its MR (lkey, bounds, PD or access)");
  }
  return 0;
}

bool in_error(const braid_qp* qp) {
  return qp->state == BRAID_QPS_ERR ||
         (qp->conn != nullptr && qp->conn->state() == braid::ConnectionState::kError);
}

braid::WcOpcode wc_opcode_of(const braid_send_wr* wr) {
  int opcode;
  std::memcpy(&opcode, &wr->opcode, sizeof(opcode));
  switch (opcode) {
    case BRAID_WR_RDMA_WRITE:
    case BRAID_WR_RDMA_WRITE_WITH_IMM:
      return braid::WcOpcode::kRdmaWrite;
    case BRAID_WR_RDMA_READ:
      return braid::WcOpcode::kRdmaRead;
    default:
      return braid::WcOpcode::kSend;
  }
}

// Work requests posted to a QP in the error state complete at once with
// WR_FLUSH_ERR, as on InfiniBand (the drain pattern: post a marker, wait
// for its flush). A full CQ drops the completion (an overrun).
// (Into the ring of the QP's engine: after the QP's own completions.)
void flush_posted(braid_cq* cq, const braid_qp* qp, uint64_t wr_id, braid::WcOpcode op) {
  braid::WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.status = braid::WcStatus::kWrFlushErr;
  wc.opcode = op;
  wc.qp_num = qp->qp_num;
  cq->ring(qp->engine).push(wc);
}

}  // namespace

namespace braid {
void set_last_error(const std::string& why) {
  g_last_error = why;
}
namespace {
std::mutex g_threads_lock;
std::vector<braid_context*> g_threaded;  // contexts whose progress thread runs
}  // namespace

void start_progress_thread(braid_context* c) {
  std::lock_guard<std::mutex> t(c->thread_lock);
  if (c->threaded.load() || c->stop.load()) return;
  c->locking = true;  // (with several engines, already)
  c->threaded = true;
  for (uint16_t k = 0; k < c->engines(); ++k) {
    c->slots[k]->progress = std::thread(progress_loop, c, k);
  }
  std::lock_guard<std::mutex> g(g_threads_lock);
  g_threaded.push_back(c);
}

void stop_progress_thread(braid_context* c) {
  // A second caller (close while the exit handler stops the threads)
  // waits here until they have been joined.
  std::lock_guard<std::mutex> t(c->thread_lock);
  if (!c->threaded.load() || c->stop.load()) return;
  {
    std::lock_guard<std::mutex> w(c->wake_lock);
    c->stop = true;
  }
  c->wake.notify_all();
  for (auto& s : c->slots) {
    if (s->progress.joinable()) s->progress.join();
  }
  std::lock_guard<std::mutex> g(g_threads_lock);
  g_threaded.erase(std::remove(g_threaded.begin(), g_threaded.end(), c), g_threaded.end());
}

void stop_all_progress_threads() {
  std::vector<braid_context*> live;
  {
    std::lock_guard<std::mutex> g(g_threads_lock);
    live = g_threaded;
  }
  for (braid_context* c : live) stop_progress_thread(c);
}
}  // namespace braid

extern "C" {

int braid_paths_from_name(const char* name) {
  if (name == nullptr) return 0;
  const auto p = braid::path_policy_named(name);
  return p ? static_cast<int>(*p) + 1 : 0;
}

const char* braid_paths_name(int paths) {
  if (paths < 1 || static_cast<size_t>(paths) > braid::kPathPolicyCount) return nullptr;
  // kName is a literal: its data ends in a NUL.
  return braid::path_policy_name(static_cast<braid::PathPolicy>(paths - 1)).data();
}

int braid_cc_from_name(const char* name) {
  if (name == nullptr) return 0;
  const auto a = braid::cc_algorithm_named(name);
  return a ? static_cast<int>(*a) + 1 : 0;
}

const char* braid_cc_name(int cc) {
  if (cc < 1 || static_cast<size_t>(cc) > braid::kCcAlgorithmCount) return nullptr;
  // kName is a literal: its data ends in a NUL.
  return braid::cc_algorithm_name(static_cast<braid::CcAlgorithm>(cc - 1)).data();
}

const char* braid_last_error(void) {
  return g_last_error.c_str();
}

void braid_gid_from_ipv4(uint32_t ip, union braid_gid* gid) {
  std::memset(gid->raw, 0, sizeof(gid->raw));
  gid->raw[10] = 0xff;
  gid->raw[11] = 0xff;
  gid->raw[12] = static_cast<uint8_t>(ip >> 24);
  gid->raw[13] = static_cast<uint8_t>(ip >> 16);
  gid->raw[14] = static_cast<uint8_t>(ip >> 8);
  gid->raw[15] = static_cast<uint8_t>(ip);
}

int braid_gid_to_ipv4(const union braid_gid* gid, uint32_t* ip) {
  for (int i = 0; i < 10; ++i) {
    if (gid->raw[i] != 0) return EINVAL;
  }
  if (gid->raw[10] != 0xff || gid->raw[11] != 0xff) return EINVAL;
  *ip = (uint32_t{gid->raw[12]} << 24) | (uint32_t{gid->raw[13]} << 16) |
        (uint32_t{gid->raw[14]} << 8) | gid->raw[15];
  return 0;
}

// Before the port closes, the device's closed QPs wait for their peers'
// answers (Endpoint::close_connection): a memif or vhost peer loses what it
// has not read from the rings when the port goes. The records end on their
// own once their retries are spent (about 63 ms unanswered); the wait ends
// sooner when the link goes down (the peer's port closed) or the TX ring
// stops draining (a peer that no longer reads), and in any case after the
// records' whole span and a margin.
static void linger(braid_context* c) {
  auto closing = [c] {
    size_t n = 0;
    for (auto& s : c->slots) n += s->engine->endpoint().closing();
    return n;
  };
  if (closing() == 0) return;
  const braid::EndpointConfig& ec = c->slots[0]->engine->endpoint().config();
  const braid::TimeNs span =
      ec.close_retry_ns * ((braid::TimeNs{1} << std::min<uint8_t>(ec.close_sends, 16)) - 1);
  // The backends' own events wait meanwhile (a memif peer that exits has
  // DPDK's interrupt thread unmap the rings a burst is reading: SIGSEGV at
  // close, 1 run in 15 under load). Events that cannot be held (the thread
  // did not park): the wait polls all the same, as before.
  size_t held = 0;
  for (; held < c->slots.size(); ++held) {
    if (!c->slots[held]->engine->io().hold_events()) break;
  }
  const uint64_t deadline = steady_ns() + span + 20'000'000;
  for (uint32_t pass = 0; closing() > 0; ++pass) {
    if ((pass & 63) == 0) {
      if (steady_ns() > deadline) break;
      bool go = false;
      for (auto& s : c->slots) go |= !s->engine->io().link_up() || s->engine->tx_stalled();
      if (go) break;
    }
    for (auto& s : c->slots) s->engine->poll();
  }
  while (held > 0) c->slots[--held]->engine->io().release_events();
}

struct braid_context* braid_open_device(const struct braid_device_config* config) {
  return braid::open_device(config, nullptr);
}

int braid_lock_calls(struct braid_context* c) {
  if (c == nullptr) return EINVAL;
  c->locking = true;
  return 0;
}

int braid_close_device(struct braid_context* c) {
  if (c == nullptr) return EINVAL;
  if (c->open_objects != 0) {
    return fail(EBUSY, std::to_string(c->open_objects) + " objects still exist on this device");
  }
  braid::stop_progress_thread(c);
  linger(c);
  delete c;
  return 0;
}

const char* braid_stats_name(struct braid_context* c) {
  return c == nullptr ? "" : c->stats_name.c_str();
}

int braid_progress(struct braid_context* c) {
  int n = 0;
  for (uint16_t k = 0; k < c->engines(); ++k) {
    EngineGuard g(c, k, Drives::kYes);
    n += progress_locked(c, k);
  }
  idle_pass(c, n > 0);
  return n;
}

int braid_query_device(struct braid_context* c, struct braid_device_attr* a) {
  if (c == nullptr || a == nullptr) return EINVAL;
  std::memset(a, 0, sizeof(*a));
  std::snprintf(a->fw_ver, sizeof(a->fw_ver), "braid-0.1");
  a->max_mr_size = ~uint64_t{0};
  // Not an IEEE-assigned OUI (Braid has none): the locally administered
  // prefix of Braid's node GUIDs (02:b7:a1), non-zero as programs expect.
  a->vendor_id = BRAID_VENDOR_ID;
  a->vendor_part_id = 1;
  a->max_qp = 65535;
  a->max_qp_wr = 32768;
  a->max_sge = braid::kMaxSge;
  a->max_cq = 65535;
  a->max_cqe = 1 << 20;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 20;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->phys_port_cnt = 1;
  return 0;
}

static braid_mtu ib_mtu_for(uint32_t payload) {
  if (payload >= 4096) return BRAID_MTU_4096;
  if (payload >= 2048) return BRAID_MTU_2048;
  if (payload >= 1024) return BRAID_MTU_1024;
  if (payload >= 512) return BRAID_MTU_512;
  return BRAID_MTU_256;
}

int braid_query_port(struct braid_context* c, uint8_t port, struct braid_port_attr* a) {
  if (c == nullptr || a == nullptr || port != 1) return EINVAL;
  Guard g(c);
  std::memset(a, 0, sizeof(*a));
  const uint32_t link_mtu = c->engine->io().max_frame() - braid::wire_l2();
  bool stalled = false;
  for (auto& s : c->slots) stalled |= s->engine->tx_stalled();
  a->state = c->engine->io().link_up() && !stalled ? BRAID_PORT_ACTIVE : BRAID_PORT_DOWN;
  a->link_mtu = link_mtu;
  a->tx_in_place = c->engine->io().tx_external() ? 1 : 0;
  a->max_mtu = a->active_mtu = ib_mtu_for(braid::max_payload(link_mtu, c->trailer_bytes()));
  a->gid_tbl_len = 1;
  a->max_msg_sz = 0x7fffffff;
  a->link_layer = 2;
  return 0;
}

int braid_query_gid(struct braid_context* c, uint8_t port, int index, union braid_gid* gid) {
  if (c == nullptr || gid == nullptr || port != 1 || index != 0) return EINVAL;
  braid_gid_from_ipv4(c->ip, gid);
  return 0;
}

struct braid_pd* braid_alloc_pd(struct braid_context* c) {
  if (c == nullptr) return fail_null<braid_pd>(EINVAL, "no device");
  Guard g(c);
  ++c->open_objects;
  return new braid_pd{c, c->next_pd++};
}

int braid_dealloc_pd(struct braid_pd* pd) {
  if (pd == nullptr) return EINVAL;
  braid_context* c = pd->context;
  Guard g(c);
  if (pd->users > 0) {
    return fail(EBUSY, "dealloc_pd: " + std::to_string(pd->users) + " MRs and QPs still use it");
  }
  --c->open_objects;
  delete pd;
  return 0;
}

struct braid_mr* braid_reg_mr(struct braid_pd* pd, void* addr, size_t length, int access) {
  if (pd == nullptr || (addr == nullptr && length > 0)) {
    return fail_null<braid_mr>(EINVAL, "reg_mr: no PD or no address");
  }
  constexpr int kKnown = BRAID_ACCESS_LOCAL_WRITE | BRAID_ACCESS_REMOTE_WRITE |
                         BRAID_ACCESS_REMOTE_READ | BRAID_ACCESS_REMOTE_ATOMIC |
                         BRAID_ACCESS_RELAXED_ORDERING;
  if ((access & ~kKnown) != 0) return fail_null<braid_mr>(EINVAL, "reg_mr: unknown access flags");
  // As libibverbs: remote write and remote atomics need local write.
  if ((access & (BRAID_ACCESS_REMOTE_WRITE | BRAID_ACCESS_REMOTE_ATOMIC)) &&
      !(access & BRAID_ACCESS_LOCAL_WRITE)) {
    return fail_null<braid_mr>(EINVAL, "reg_mr: REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE");
  }
  braid_context* c = pd->context;
  Guard g(c);
  const uint32_t core_access =
      static_cast<uint32_t>(access) &
      (braid::kAccessLocalWrite | braid::kAccessRemoteWrite | braid::kAccessRemoteRead);
  const uint32_t key = c->memory->register_region(addr, length, core_access, pd->id);
  if (key == 0) return fail_null<braid_mr>(ENOMEM, "reg_mr: memory-region table full");
  ++c->open_objects;
  ++pd->users;
  return new braid_mr{c, pd, addr, length, key, key};
}

int braid_dereg_mr(struct braid_mr* mr) {
  if (mr == nullptr) return EINVAL;
  braid_context* c = mr->context;
  Guard g(c);
  if (!c->memory->deregister(mr->lkey)) return EINVAL;
  // Work still outstanding on the region fails (LOC_PROT_ERR, its QP to
  // error) rather than touching memory the application may free now.
  for (braid_qp* qp : c->qps) {
    if (qp->conn != nullptr && qp->conn->revoke_local_key(mr->lkey)) {
      c->slots[qp->engine]->engine->transmit();
    }
    auto& early = qp->early_recvs;
    for (auto it = early.begin(); it != early.end();) {
      bool uses = false;
      for (uint8_t i = 0; i < it->second.num; ++i) uses |= it->second.sge[i].lkey == mr->lkey;
      if (!uses) {
        ++it;
        continue;
      }
      braid::WorkCompletion wc;
      wc.wr_id = it->first;
      wc.status = braid::WcStatus::kLocProtErr;
      wc.opcode = braid::WcOpcode::kRecv;
      wc.qp_num = qp->qp_num;
      qp->recv_cq->ring(qp->engine).push(wc);
      it = early.erase(it);
    }
  }
  --c->open_objects;
  --mr->pd->users;
  delete mr;
  return 0;
}

struct braid_comp_channel* braid_create_comp_channel(struct braid_context* c) {
  if (c == nullptr) return fail_null<braid_comp_channel>(EINVAL, "no device");
  // Blocking, as rdma-core's channel fd: the application may make it
  // non-blocking (fcntl O_NONBLOCK), and get_cq_event then returns EAGAIN.
  const int fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0) return fail_null<braid_comp_channel>(errno, "eventfd failed");
  // Events need someone to make progress while the application sleeps.
  braid::start_progress_thread(c);
  Guard g(c);
  ++c->open_objects;
  return new braid_comp_channel{c, fd, {}, false};
}

int braid_destroy_comp_channel(struct braid_comp_channel* ch) {
  if (ch == nullptr) return EINVAL;
  braid_context* c = ch->context;
  Guard g(c);
  for (braid_cq* cq : c->cqs) {
    if (cq->channel == ch) return fail(EBUSY, "a CQ still uses this channel");
  }
  close(ch->fd);
  --c->open_objects;
  delete ch;
  return 0;
}

int braid_comp_channel_fd(struct braid_comp_channel* ch) {
  return ch == nullptr ? -1 : ch->fd;
}

struct braid_cq* braid_create_cq(struct braid_context* c, int cqe, void* cq_context,
                                 struct braid_comp_channel* channel, int comp_vector) {
  if (comp_vector != 0) return fail_null<braid_cq>(EINVAL, "create_cq: one completion vector (0)");
  if (c == nullptr || cqe < 1 || cqe > (1 << 20)) {
    return fail_null<braid_cq>(EINVAL, "create_cq: cqe must be 1..2^20");
  }
  Guard g(c);
  auto* cq = new braid_cq(c, static_cast<uint32_t>(cqe), cq_context, channel);
  c->cqs.push_back(cq);
  ++c->open_objects;
  return cq;
}

int braid_destroy_cq(struct braid_cq* cq) {
  if (cq == nullptr) return EINVAL;
  braid_context* c = cq->context;
  Guard g(c);
  if (cq->users > 0) return fail(EBUSY, "destroy_cq: QPs still use this CQ");
  std::lock_guard<std::mutex> e(c->event_lock);
  c->cqs.erase(std::remove(c->cqs.begin(), c->cqs.end(), cq), c->cqs.end());
  if (cq->armed) c->armed.fetch_sub(1, std::memory_order_relaxed);
  if (cq->channel != nullptr) {
    auto& f = cq->channel->fired;
    f.erase(std::remove(f.begin(), f.end(), cq), f.end());
    channel_drain_if_empty(cq->channel);
  }
  --c->open_objects;
  delete cq;
  return 0;
}

int braid_poll_cq(struct braid_cq* cq, int n, struct braid_wc* out) {
  if (cq == nullptr || n < 0 || (n > 0 && out == nullptr)) return -EINVAL;
  braid_context* c = cq->context;
  const uint16_t engines = c->engines();
  // The engines' rings in turn, from a different one each call; each
  // engine whose ring is empty is driven once (with several engines, all
  // of them: a QP's packets may arrive on any engine's queue).
  const uint16_t first = cq->next_ring.load(std::memory_order_relaxed);
  if (engines > 1) {
    cq->next_ring.store(static_cast<uint16_t>((first + 1) % engines), std::memory_order_relaxed);
  }
  int got = 0;
  bool worked = false;
  for (uint16_t i = 0; i < engines; ++i) {
    const auto k = static_cast<uint16_t>((first + i) % engines);
    bool first_look = true;
    for (;;) {
      uint32_t taken = 0;
      // Converted as they leave the ring, under the engine's lock.
      auto convert = [out, got](const braid::WorkCompletion& wc) mutable {
        braid_wc& w = out[got++];
        w = braid_wc{};
        w.wr_id = wc.wr_id;
        w.status = static_cast<braid_wc_status>(wc.status);
        w.opcode = static_cast<braid_wc_opcode>(wc.opcode);
        w.byte_len = wc.byte_len;
        w.qp_num = wc.qp_num;
        if (wc.has_imm) {
          w.imm_data = htonl(wc.imm_data);
          w.wc_flags = BRAID_WC_WITH_IMM;
        }
      };
      {
        // An engine none of this CQ's QPs run on is driven only if no
        // other thread is at it already (its progress thread, or a thread
        // polling a CQ of its own): threads on different engines do not
        // queue up for each other's locks.
        const bool ours = cq->has_ring[k].load(std::memory_order_acquire);
        EngineGuard g(c, k, Drives::kYes,
                      ours ? EngineGuard::Wait::kBlock : EngineGuard::Wait::kTry);
        if (!g.owns()) break;
        braid::CompletionQueue* r = cq->rings[k].get();
        if (first_look && (r == nullptr || r->size() == 0)) {
          worked |= progress_locked(c, k) > 0;
        }
        first_look = false;
        if (r != nullptr)
          taken = r->poll_each(static_cast<uint32_t>(std::min(n - got, 64)), convert);
      }
      got += static_cast<int>(taken);
      if (taken < 64 || got == n) break;
    }
  }
  idle_pass(c, worked || got > 0);
  return got;
}

int braid_req_notify_cq(struct braid_cq* cq, int solicited_only) {
  (void)solicited_only;
  if (cq == nullptr || cq->channel == nullptr) return EINVAL;
  braid_context* c = cq->context;
  Guard g(c);  // every engine's ring stands still
  std::lock_guard<std::mutex> e(c->event_lock);
  if (!cq->armed) {
    cq->armed = true;
    for (uint16_t k = 0; k < c->engines(); ++k) {
      cq->armed_at[k] = cq->rings[k] ? cq->rings[k]->pushed() : 0;
    }
    // The application is about to wait for an event: from now on only the
    // threads drive the device.
    if (c->armed.fetch_add(1, std::memory_order_relaxed) == 0 && c->threaded) {
      std::lock_guard<std::mutex> w(c->wake_lock);
      c->wake.notify_all();
    }
  }
  return 0;
}

int braid_get_cq_event(struct braid_comp_channel* ch, struct braid_cq** cq, void** cq_context) {
  if (ch == nullptr || cq == nullptr || cq_context == nullptr) return EINVAL;
  for (;;) {
    {
      std::lock_guard<std::mutex> e(ch->context->event_lock);
      if (!ch->fired.empty()) {
        *cq = ch->fired.front();
        ch->fired.pop_front();
        channel_drain_if_empty(ch);
        *cq_context = (*cq)->cq_context;
        ++(*cq)->events;
        return 0;
      }
    }
    // None pending: a non-blocking fd says so, a blocking one waits for one.
    const int flags = fcntl(ch->fd, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK)) return EAGAIN;
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, -1) < 0 && errno != EINTR) return errno;
  }
}

void braid_ack_cq_events(struct braid_cq* cq, unsigned int n) {
  if (cq == nullptr) return;
  std::lock_guard<std::mutex> e(cq->context->event_lock);
  cq->acked += n;
}

uint32_t braid_qp_num(const struct braid_qp* qp) {
  return qp == nullptr ? 0 : qp->qp_num;
}

struct braid_qp* braid_create_qp(struct braid_pd* pd, struct braid_qp_init_attr* a) {
  if (pd == nullptr || a == nullptr || a->send_cq == nullptr || a->recv_cq == nullptr) {
    return fail_null<braid_qp>(EINVAL, "create_qp: PD and both CQs are required");
  }
  if (a->qp_type != BRAID_QPT_RC) {
    return fail_null<braid_qp>(EOPNOTSUPP, "create_qp: only RC queue pairs are supported");
  }
  if (a->cap.max_send_sge > braid::kMaxSge || a->cap.max_recv_sge > braid::kMaxSge ||
      a->cap.max_send_wr > 32768 || a->cap.max_recv_wr > (1u << 20) ||
      a->cap.max_inline_data > 1024) {
    return fail_null<braid_qp>(EINVAL, "create_qp: capabilities beyond the device's limits");
  }
  braid_context* c = pd->context;
  Guard g(c);
  // Numbers go round the 16-bit space rather than lowest-free first: a
  // number comes back only after 65534 others, so late packets of an old
  // QP find no connection (or a long-settled one) under it.
  uint32_t qpn = 0, counter = 0;
  for (uint32_t i = 0; i < 65535; ++i) {
    counter = (c->next_qpn - 1 + i) % 65535 + 1;  // 1..65535
    const uint32_t n = braid::qpn_of(counter, c->qpn_key);
    if (!c->qpn_used[n]) {
      qpn = n;
      break;
    }
  }
  if (qpn == 0) return fail_null<braid_qp>(ENOMEM, "create_qp: no free QP number");
  c->qpn_used[qpn] = true;
  c->next_qpn = counter % 65535 + 1;
  auto* qp = new braid_qp{};
  qp->context = c;
  qp->pd = pd;
  qp->send_cq = a->send_cq;
  qp->recv_cq = a->recv_cq;
  qp->qp_context = a->qp_context;
  qp->qp_num = qpn;
  qp->engine = c->engine_of(qpn);
  qp->init = *a;
  qp->init.cap.max_send_wr = std::max<uint32_t>(a->cap.max_send_wr, 1);
  qp->init.cap.max_recv_wr = std::max<uint32_t>(a->cap.max_recv_wr, 1);
  qp->sq_sig_all = a->sq_sig_all != 0;
  qp->inline_slots = std::bit_ceil(qp->init.cap.max_send_wr);
  qp->inline_buf.resize(size_t{qp->inline_slots} * a->cap.max_inline_data);
  for (braid_cq* cq : {a->send_cq, a->recv_cq}) {
    ++cq->users;
    if (cq->rings[qp->engine] == nullptr) {
      cq->rings[qp->engine] = std::make_unique<braid::CompletionQueue>(cq->cqe);
      cq->has_ring[qp->engine].store(true, std::memory_order_release);
    }
  }
  ++pd->users;
  ++c->open_objects;
  c->qps.push_back(qp);
  return qp;
}

int braid_destroy_qp(struct braid_qp* qp) {
  if (qp == nullptr) return EINVAL;
  braid_context* c = qp->context;
  Guard g(c);
  if (qp->conn != nullptr) {
    // The peer's last sends completed here; it learns so from our ACK. An
    // ACK not yet sent (coalesced, held), lost, or left in a ring the peer
    // has not read when our port closes would end them in RETRY_EXC_ERR
    // there: the connection's CLOSE says it again until the peer answers
    // (Endpoint::close_connection; close_device waits for the answers).
    braid::Engine& e = *c->slots[qp->engine]->engine;
    e.close_connection(static_cast<uint16_t>(qp->qp_num));
    e.transmit();
  }
  c->qpn_used[qp->qp_num] = false;
  c->qps.erase(std::remove(c->qps.begin(), c->qps.end(), qp), c->qps.end());
  // A CQ keeps its rings (and the completions in them) until it goes.
  --qp->send_cq->users;
  --qp->recv_cq->users;
  --qp->pd->users;
  --c->open_objects;
  delete qp;
  return 0;
}

// The MAC of the next hop towards peer_ip, for engine k (every engine's
// lock held). The reply may arrive on any engine's queue (a NIC's RSS sends
// ARP to one queue), so each engine asks, all are polled, and whichever
// learns it first tells k. wait_us < 0: only what is known now (resolution
// starts). With one engine this is Engine::resolve_neighbor's loop.
static bool resolve_for(braid_context* c, uint16_t k, uint32_t peer_ip, int wait_us,
                        braid::wire::MacAddr* mac) {
  braid::Engine& e = *c->slots[k]->engine;
  const braid::TimeNs deadline = e.now() + (wait_us < 0 ? 0 : uint64_t(wait_us) * 1000);
  for (;;) {
    for (auto& s : c->slots) {
      if (!s->engine->lookup_neighbor(peer_ip, mac)) continue;
      if (s->engine.get() != &e) e.learn_neighbor(peer_ip, *mac);
      return true;
    }
    if (e.neighbor_state(peer_ip) == braid::net::NeighborState::kFailed || e.now() >= deadline) {
      return false;
    }
    for (auto& s : c->slots) s->engine->poll();
  }
}

static int to_rtr(braid_qp* qp, const braid_qp_attr* a, int mask) {
  constexpr int kNeed = BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN | BRAID_QP_RQ_PSN;
  if ((mask & kNeed) != kNeed) {
    return fail(EINVAL, "modify_qp RTR needs AV, PATH_MTU, DEST_QPN and RQ_PSN");
  }
  uint32_t peer_ip = 0;
  if (braid_gid_to_ipv4(&a->ah_attr.dgid, &peer_ip) != 0) {
    return fail(EINVAL, "modify_qp RTR: the destination GID is not an IPv4-mapped address");
  }
  if (a->dest_qp_num == 0 || a->dest_qp_num > 65535) {
    return fail(EINVAL, "modify_qp RTR: destination QP number out of range");
  }
  braid_context* c = qp->context;
  braid::Engine& e = *c->slots[qp->engine]->engine;
  // The MAC comes from ARP. A short wait covers a peer that answers at once;
  // otherwise the QP goes to RTR now and sends once the reply arrives (the
  // peer may be busy in its own connection set-up).
  braid::wire::MacAddr mac{};
  const int arp_wait_us = c->config.rtr_arp_wait_us == 0 ? 2000 : c->config.rtr_arp_wait_us;
  const bool known = resolve_for(c, qp->engine, peer_ip, arp_wait_us, &mac);
  braid::ConnectionConfig cc;
  cc.await_remote_mac = !known;
  cc.local_id = static_cast<uint16_t>(qp->qp_num);
  cc.remote_id = static_cast<uint16_t>(a->dest_qp_num);
  cc.qp_num = qp->qp_num;
  cc.remote_mac = mac;
  cc.remote_ip = peer_ip;
  cc.rx_psn = a->rq_psn;
  // Until RTS gives the send PSN: READ responses sent in RTR start at the
  // requester's own initial PSN (our rq_psn), which it recognises
  // (Connection::learn_responder_psn).
  cc.tx_psn = cc.rx_psn;
  cc.pd = qp->pd->id;
  const uint32_t link_mtu = e.io().max_frame() - braid::wire_l2();
  // A path MTU below the port's is honoured to the byte. At the port's own
  // (the largest an InfiniBand MTU can name), packets fill the link: 1416
  // payload bytes at MTU 1500 rather than 1024, 8916 at 9000 rather than
  // 4096. Like RoCE, both ends need the link MTU the QP was set up with.
  const uint32_t ib_mtu = 128u << std::clamp<int>(a->path_mtu, 1, 5);
  const uint32_t link_payload = braid::max_payload(link_mtu, c->trailer_bytes());
  cc.mtu = a->path_mtu >= ib_mtu_for(link_payload) ? link_payload : std::min(ib_mtu, link_payload);
  cc.sq_depth = qp->init.cap.max_send_wr;
  cc.rq_depth = qp->init.cap.max_recv_wr;
  cc.entropy.count = c->config.entropies;
  cc.entropy.policy = static_cast<braid::PathPolicy>(c->config.paths - 1);  // checked at open
  cc.cc.algorithm = static_cast<braid::CcAlgorithm>(c->config.cc - 1);      // checked at open
  // NSCC's base RTT is the smallest measured; nothing here trims.
  cc.cc.link_bps = uint64_t{c->config.link_mbps} * 1'000'000;
  cc.cc.base_rtt_ns = uint64_t{c->config.base_rtt_us} * 1000;
  cc.cc.trimming = false;
  cc.cc.credit = c->config.credit == 1;
  cc.max_rd_atomic = 16;  // until RTS says
  // Unset, 16 (the device's max_qp_rd_atom): InfiniBand requires it at RTR.
  qp->attr.max_dest_rd_atomic = (mask & BRAID_QP_MAX_DEST_RD_ATOMIC) ? a->max_dest_rd_atomic : 16;
  cc.max_dest_rd_atomic = qp->attr.max_dest_rd_atomic;
  cc.remote_access = remote_access_of((mask & BRAID_QP_ACCESS_FLAGS) ? a->qp_access_flags
                                                                     : qp->attr.qp_access_flags);
  if (mask & BRAID_QP_MIN_RNR_TIMER) qp->attr.min_rnr_timer = a->min_rnr_timer;
  cc.rnr_delay_ns = rnr_delay_ns(qp->attr.min_rnr_timer);
  cc.peer_ack_hold_ns = braid::kAckHoldNs;
  if (mask & BRAID_QP_AUTH_NONCE) std::memcpy(cc.auth_nonce.data(), a->auth_nonce, 16);
  qp->conn = e.endpoint().create_connection(cc, &qp->send_cq->ring(qp->engine),
                                            &qp->recv_cq->ring(qp->engine));
  if (qp->conn == nullptr) return fail(EBUSY, "modify_qp RTR: QP number in use in the core");
  // The device has a peer now: from here to close its bursts must not race
  // the peer's going (a memif peer that exits makes DPDK unmap the rings a
  // burst reads). Before the first RTR the link may still come and go (a
  // client that retries its connection).
  for (auto& s : c->slots) s->engine->io().hold_events_until_close();
  if (!known) e.route_when_resolved(static_cast<uint16_t>(qp->qp_num), peer_ip);
  for (auto& [id, sgl] : qp->early_recvs) qp->conn->post_recv(id, sgl);
  qp->early_recvs.clear();
  qp->attr.dest_qp_num = a->dest_qp_num;
  qp->attr.rq_psn = a->rq_psn;
  qp->attr.path_mtu = a->path_mtu;
  qp->attr.ah_attr = a->ah_attr;
  if (mask & BRAID_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a->qp_access_flags;
  return 0;
}

// What RTS->RTS may change, as InfiniBand's state table allows for RC (the
// kernel refuses the rest): access flags and the RNR timer. Also applied
// at RTR->RTS.
static void apply_access_and_rnr(braid_qp* qp, const braid_qp_attr* a, int mask) {
  if (mask & BRAID_QP_ACCESS_FLAGS) {
    qp->attr.qp_access_flags = a->qp_access_flags;
    qp->conn->set_remote_access(remote_access_of(a->qp_access_flags));
  }
  if (mask & BRAID_QP_MIN_RNR_TIMER) {
    qp->attr.min_rnr_timer = a->min_rnr_timer;
    qp->conn->set_min_rnr_delay(rnr_delay_ns(a->min_rnr_timer));
  }
}

static int rts_to_rts(braid_qp* qp, const braid_qp_attr* a, int mask) {
  constexpr int kAllowed =
      BRAID_QP_STATE | BRAID_QP_CUR_STATE | BRAID_QP_ACCESS_FLAGS | BRAID_QP_MIN_RNR_TIMER;
  if (mask & ~kAllowed) {
    return fail(EINVAL,
                "modify_qp RTS->RTS: only the access flags and the RNR timer may change "
                "(timeout, retry counts, PSNs and READ limits are set at RTR and RTS)");
  }
  apply_access_and_rnr(qp, a, mask);  // (a QP in RTS has its connection)
  return 0;
}

static int to_rts(braid_qp* qp, const braid_qp_attr* a, int mask) {
  if (!(mask & BRAID_QP_SQ_PSN)) return fail(EINVAL, "modify_qp RTS needs SQ_PSN");
  if ((mask & BRAID_QP_TIMEOUT) && a->timeout > 31) {
    return fail(EINVAL, "modify_qp: timeout must be 0..31");
  }
  if (!qp->conn->set_send_psn(a->sq_psn)) {
    if (qp->conn->auth_broken()) {
      return fail(EIO, "modify_qp RTS: the QP's keys could not be made (libcrypto failed)");
    }
    return fail(EINVAL, "modify_qp RTS: the send queue has already started");
  }
  // Unset (InfiniBand requires them for RC), the defaults of an RC QP as
  // perftest leaves it.
  qp->attr.retry_cnt = (mask & BRAID_QP_RETRY_CNT) ? std::min<uint8_t>(a->retry_cnt, 7) : 7;
  qp->attr.rnr_retry = (mask & BRAID_QP_RNR_RETRY) ? std::min<uint8_t>(a->rnr_retry, 7) : 7;
  qp->attr.timeout = (mask & BRAID_QP_TIMEOUT) ? a->timeout : 14;
  qp->attr.max_rd_atomic = (mask & BRAID_QP_MAX_QP_RD_ATOMIC) ? a->max_rd_atomic : 16;
  qp->attr.sq_psn = a->sq_psn;
  // IB's local ACK timeout (4.096 us x 2^timeout) caps Braid's adaptive
  // RTO; 0 is infinite: the QP waits for its peer forever (RTO backoff
  // capped at 50 ms, so that a peer that comes back is heard from soon).
  const uint8_t timeout = qp->attr.timeout;
  const braid::TimeNs rto_max =
      timeout == 0 ? 50'000'000ull : std::min<braid::TimeNs>(4096ull << timeout, 60'000'000'000ull);
  qp->conn->set_retry(qp->attr.retry_cnt, qp->attr.rnr_retry, rto_max, timeout == 0);
  qp->conn->set_max_rd_atomic(qp->attr.max_rd_atomic);
  apply_access_and_rnr(qp, a, mask);
  return 0;
}

int braid_modify_qp(struct braid_qp* qp, struct braid_qp_attr* a, int mask) {
  if (qp == nullptr || a == nullptr) return EINVAL;
  braid_context* c = qp->context;
  Guard g(c);
  if (!(mask & BRAID_QP_STATE)) return fail(EINVAL, "modify_qp: QP_STATE missing");
  const braid_qp_state from = qp->state, to = a->qp_state;
  int rc = 0;
  if (to == BRAID_QPS_ERR) {
    if (qp->conn != nullptr) qp->conn->set_error(braid::WcStatus::kWrFlushErr);
    // Receives posted before RTR have no connection to flush them.
    for (auto& r : qp->early_recvs) {
      flush_posted(qp->recv_cq, qp, r.first, braid::WcOpcode::kRecv);
    }
    qp->early_recvs.clear();
  } else if (to == BRAID_QPS_RESET) {
    if (qp->conn != nullptr) {
      c->slots[qp->engine]->engine->destroy_connection(static_cast<uint16_t>(qp->qp_num));
      qp->conn = nullptr;
    }
    qp->early_recvs.clear();
  } else if (from == BRAID_QPS_RESET && to == BRAID_QPS_INIT) {
    if (mask & BRAID_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a->qp_access_flags;
  } else if (from == BRAID_QPS_INIT && to == BRAID_QPS_INIT) {
    if (mask & BRAID_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a->qp_access_flags;
  } else if (from == BRAID_QPS_INIT && to == BRAID_QPS_RTR) {
    rc = to_rtr(qp, a, mask);
  } else if (from == BRAID_QPS_RTR && to == BRAID_QPS_RTS) {
    rc = to_rts(qp, a, mask);
  } else if (from == BRAID_QPS_RTS && to == BRAID_QPS_RTS) {
    rc = rts_to_rts(qp, a, mask);
  } else {
    return fail(EINVAL, "modify_qp: transition not allowed");
  }
  if (rc != 0) return rc;
  qp->state = to;
  qp->attr.qp_state = to;
  return 0;
}

int braid_query_qp(struct braid_qp* qp, struct braid_qp_attr* a, int mask,
                   struct braid_qp_init_attr* init) {
  (void)mask;
  if (qp == nullptr || a == nullptr) return EINVAL;
  EngineGuard g(qp->context, qp->engine);
  *a = qp->attr;
  a->qp_state = a->cur_qp_state =
      qp->conn != nullptr && qp->conn->state() == braid::ConnectionState::kError ? BRAID_QPS_ERR
                                                                                 : qp->state;
  a->cap = qp->init.cap;
  if (init != nullptr) *init = qp->init;
  return 0;
}

int braid_query_qp_stats(struct braid_qp* qp, struct braid_qp_stats* out) {
  if (qp == nullptr || out == nullptr) return EINVAL;
  EngineGuard g(qp->context, qp->engine);
  std::memset(out, 0, sizeof(*out));
  if (qp->conn == nullptr) return 0;
  const braid::ConnectionStats& s = qp->conn->stats();
  out->data_packets_sent = s.data_sent;
  out->retransmits = s.retransmits;
  out->data_packets_received = s.data_received;
  out->duplicates = s.duplicates;
  out->acks_sent = s.acks_sent;
  out->acks_received = s.acks_received;
  out->nacks_sent = s.nacks_sent;
  out->nacks_received = s.nacks_received;
  out->lost_inferred = s.lost_inferred;
  out->lost_nacked = s.lost_nacked;
  out->lost_timeout = s.lost_timeout;
  out->timeouts = s.timeouts;
  out->rnr_nacks_sent = s.rnr_nacks;
  out->rnr_nacks_received = s.rnr_nacks_received;
  out->access_errors = s.access_errors;
  out->bytes_placed = s.bytes_placed;
  const braid::Connection& c = *qp->conn;
  out->srtt_ns = c.srtt();
  out->min_rtt_ns = c.min_rtt();
  out->cwnd_bytes = c.cc().cwnd_bytes();
  out->inflight_bytes = c.inflight_bytes();
  out->entropies = c.paths().count();
  out->paths_bad = c.paths().bad_count();
  out->rate_mbps = static_cast<uint32_t>(c.cc().pacing_rate_bps() / 1'000'000);
  out->ecn_received = s.ecn_received;
  out->cnps_sent = s.cnps_sent;
  out->cnps_received = s.cnps_received;
  out->credit_requests_sent = s.credit_requests_sent;
  out->credit_requests_received = s.credit_requests_received;
  out->credits_sent = s.credits_sent;
  out->credits_received = s.credits_received;
  out->credit_bytes_granted = s.credit_bytes_granted;
  out->unscheduled_sent = s.unscheduled_sent;
  out->credit_stalls = s.credit_stalls;
  out->wrong_job_id = s.wrong_job_id;
  out->auth_failed = s.auth_failed;
  out->auth_replayed = s.auth_replayed;
  out->unsealed = s.unsealed;
  out->spurious_timeouts = s.spurious_timeouts;
  if (const braid::NsccCc* n = c.cc().nscc(); n != nullptr && n->configured()) {
    out->base_rtt_ns = static_cast<uint32_t>(n->base_rtt_ns());
    out->target_delay_ns = static_cast<uint32_t>(n->target_delay_ns());
    out->max_cwnd_bytes = static_cast<uint32_t>(n->max_window());
    out->decreases = static_cast<uint32_t>(n->decreases());
  }
  return 0;
}

int braid_query_path_stats(struct braid_qp* qp, unsigned int index, struct braid_path_stats* out) {
  if (qp == nullptr || out == nullptr) return EINVAL;
  EngineGuard g(qp->context, qp->engine);
  if (qp->conn == nullptr || index >= qp->conn->paths().count()) return EINVAL;
  const braid::PathSet& p = qp->conn->paths();
  const auto i = static_cast<uint8_t>(index);
  const braid::EntropyStats& s = p.stats(i);
  std::memset(out, 0, sizeof(*out));
  out->udp_src_port = p.entropy(i);
  out->state = static_cast<uint8_t>(p.health(i).state);
  out->losses_in_row = p.health(i).losses_in_row;
  out->sent = s.sent;
  out->acked = s.acked;
  out->ecn_marked = s.ecn_marked;
  out->lost = s.lost;
  out->srtt_ns = s.srtt_ns;
  out->min_rtt_ns = s.min_rtt_ns;
  out->late_ns = s.late_ns;
  return 0;
}

int braid_query_port_stats(struct braid_context* c, struct braid_port_stats* out) {
  if (c == nullptr || out == nullptr) return EINVAL;
  Guard g(c);
  std::memset(out, 0, sizeof(*out));
  // The port's frames (every queue's) and each engine's counters.
  braid::PacketIoStats io = c->port ? c->port->stats() : c->engine->io().stats();
  for (uint16_t k = 1; k < c->engines() && !c->port; ++k) {
    const braid::PacketIoStats q = c->slots[k]->engine->io().stats();
    io.rx_frames += q.rx_frames;
    io.tx_frames += q.tx_frames;
    io.rx_missed += q.rx_missed;
    io.tx_dropped += q.tx_dropped;
    io.tx_external += q.tx_external;
  }
  out->rx_frames = io.rx_frames;
  out->tx_frames = io.tx_frames;
  out->rx_missed = io.rx_missed;
  out->tx_dropped = io.tx_dropped;
  out->tx_in_place = io.tx_external;
  for (auto& s : c->slots) {
    braid::Engine& en = *s->engine;
    const braid::EngineStats& e = en.stats();
    out->rx_dropped += en.endpoint().stats().dropped();
    out->rx_bad_crc += en.endpoint().stats().drops_for(braid::wire::DropReason::kBadCrc);
    out->tx_ring_full += e.tx_ring_full;
    out->tx_stalled_ms = std::max<uint64_t>(out->tx_stalled_ms, en.tx_blocked_ns() / 1'000'000);
    out->tx_no_buffer += e.tx_no_buffer;
    out->arp_frames += e.arp_frames;
    out->poll_gaps += e.poll_gaps;
    out->longest_poll_gap_us =
        std::max<uint64_t>(out->longest_poll_gap_us, e.longest_poll_gap_ns / 1000);
    out->steered += e.steered_in;
    out->steer_dropped += e.steer_dropped;
  }
  return 0;
}

int braid_post_recv(struct braid_qp* qp, struct braid_recv_wr* wr, struct braid_recv_wr** bad) {
  if (qp == nullptr) return EINVAL;
  braid_context* c = qp->context;
  EngineGuard g(c, qp->engine, Drives::kYes);
  for (; wr != nullptr; wr = wr->next) {
    braid::SgList sgl;
    int rc = 0;
    if (in_error(qp)) {
      flush_posted(qp->recv_cq, qp, wr->wr_id, braid::WcOpcode::kRecv);
      continue;
    }
    if (qp->state == BRAID_QPS_RESET) {
      rc = fail(EINVAL, "post_recv: QP in RESET");
    } else if (wr->num_sge > static_cast<int>(qp->init.cap.max_recv_sge) && wr->num_sge > 1) {
      rc = fail(EINVAL, "post_recv: more SGEs than max_recv_sge");
    } else if (!to_sgl(c, qp->pd, wr->sg_list, wr->num_sge, braid::kAccessLocalWrite, &sgl)) {
      rc = fail(EINVAL, "post_recv: a buffer is outside its MR or lacks LOCAL_WRITE");
    } else if (qp->conn == nullptr) {
      if (qp->early_recvs.size() >= qp->init.cap.max_recv_wr) {
        rc = fail(ENOMEM, "post_recv: receive queue full");
      } else {
        qp->early_recvs.emplace_back(wr->wr_id, sgl);
      }
    } else {
      rc = post_error(qp->conn->post_recv(wr->wr_id, sgl), "post_recv");
    }
    if (rc != 0) {
      if (bad != nullptr) *bad = wr;
      return rc;
    }
  }
  c->slots[qp->engine]->engine->transmit();  // the doorbell: send now
  return 0;
}

int braid_post_send(struct braid_qp* qp, struct braid_send_wr* wr, struct braid_send_wr** bad) {
  if (qp == nullptr) return EINVAL;
  braid_context* c = qp->context;
  EngineGuard g(c, qp->engine, Drives::kYes);
  // An idle QP sends at once (latency); one with work under way leaves the
  // frames for the next poll, which sends them in one burst with the rest.
  if (in_error(qp)) {
    for (; wr != nullptr; wr = wr->next) {
      flush_posted(qp->send_cq, qp, wr->wr_id, wc_opcode_of(wr));
    }
    return 0;
  }
  const bool was_idle = qp->conn != nullptr && qp->conn->outstanding_sends() == 0;
  for (; wr != nullptr; wr = wr->next) {
    braid::SendRequest req;
    int rc = prepare_send(qp, wr, true, &req);
    if (rc == 0) rc = post_error(qp->conn->post_send(req), "post_send");
    if (rc != 0) {
      if (bad != nullptr) *bad = wr;
      return rc;
    }
  }
  if (was_idle) c->slots[qp->engine]->engine->transmit();  // the doorbell: send now
  return 0;
}

int braid_post_send_all(struct braid_qp* qp, struct braid_send_wr* wr) {
  if (qp == nullptr) return EINVAL;
  braid_context* c = qp->context;
  EngineGuard g(c, qp->engine, Drives::kYes);
  if (in_error(qp)) {
    for (; wr != nullptr; wr = wr->next) {
      flush_posted(qp->send_cq, qp, wr->wr_id, wc_opcode_of(wr));
    }
    return 0;
  }
  // Everything that can refuse a work request is checked first, the
  // queue's room included: then nothing below can fail.
  uint32_t n = 0;
  for (braid_send_wr* w = wr; w != nullptr; w = w->next, ++n) {
    braid::SendRequest req;
    if (const int rc = prepare_send(qp, w, false, &req)) return rc;
  }
  if (n == 0) return 0;
  if (qp->conn->outstanding_sends() + n > qp->init.cap.max_send_wr) {
    return fail(ENOMEM, "post_send: queue full");
  }
  const bool was_idle = qp->conn->outstanding_sends() == 0;
  for (; wr != nullptr; wr = wr->next) {
    braid::SendRequest req;
    int rc = prepare_send(qp, wr, true, &req);
    if (rc == 0) rc = post_error(qp->conn->post_send(req), "post_send");
    if (rc != 0) return rc;  // not reached: checked above
  }
  if (was_idle) c->slots[qp->engine]->engine->transmit();
  return 0;
}

}  // extern "C"

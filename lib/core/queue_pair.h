// One RC queue pair's semantics (UET's SES side): the send queue and its
// segmentation into packets, the READs this end answers, the receive queue,
// placement of each arriving packet where it belongs (memory keys checked
// first), and completions in RC order.
//
// It knows nothing of PSNs' reliability: the connection (the PDC side:
// connection.h) numbers the packets it asks for, tells it how far the
// peer has acknowledged (snd_una) and how far this end holds everything in
// order (cack), and it completes what those allow. Errors it finds are
// returned (a WcStatus other than kSuccess) for the connection to stop on.
// Files: queue_pair.cc (requester, completions, flush), queue_pair_rx.cc
// (responder: placement, deferred tails, READs answered).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/completion_queue.h"
#include "core/connection_stats.h"
#include "core/memory_table.h"
#include "core/ring.h"
#include "core/sg_list.h"
#include "core/shared_receive_queue.h"
#include "core/types.h"
#include "wire/frame.h"

namespace braid {

// Why a queue pair went to its error state, for the asynchronous event an
// InfiniBand channel adapter raises; kNone when its completions say it all
// (a requester's errors, an error the user asked for).
enum class QpFault : uint8_t {
  kNone,
  kAccess,         // as responder it refused a request for its access (a bad R_Key...)
  kInvalid,        // as responder it refused a request it could not carry out
  kSendCqOverrun,  // a completion found its send CQ full
  kRecvCqOverrun,  // ... its receive CQ
};
// Told once, when the queue pair has entered its error state and flushed
// its work requests.
using QpErrorHook = void (*)(void* arg, QpFault why);

// A queue pair's own settings (from ConnectionConfig, clamped there).
struct QpConfig {
  uint32_t qp_num = 0;      // reported in work completions
  uint32_t remote_qpn = 0;  // the peer's QP, named in requests (24 bits)
  uint16_t slot = 0;        // its slot on its connection: READ responses name it
  uint32_t pd = 0;          // protection domain for remote accesses
  uint32_t mtu = 4096;      // payload bytes per packet
  uint32_t sq_depth = 256;
  uint32_t rq_depth = 256;
  uint32_t max_rd_atomic = 16;       // READs outstanding as requester
  uint32_t max_dest_rd_atomic = 16;  // ... accepted as responder
  uint32_t remote_access = 0;        // kAccessRemoteWrite, kAccessRemoteRead
  uint32_t max_tails = 1024;         // deferred tails held at most (a receive window's)
  // Where the peer queue pair's PSNs start (IB's rq_psn): in a shared PDC,
  // where the peer's PSN space starts when the peer names this queue pair
  // (ConnectionConfig::shared).
  uint32_t rx_psn = 0;
  bool grow_rings = true;  // queues start small and double on first use
  // Receives come from this shared receive queue (rq_depth: how many it
  // may hold bound at once), not from post_recv.
  SharedReceiveQueue* srq = nullptr;
  QpErrorHook on_error = nullptr;
  void* on_error_arg = nullptr;
};

enum class ConnectionState : uint8_t { kActive, kError };

// The SES return code that reports an access error to a READ requester.
uint8_t ses_return_code(AccessError e);

struct SendRequest {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::kWrite;
  bool signaled = true;
  SgList local;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm_data = 0;
  // IBV_SEND_FENCE: starts only once every earlier READ has completed.
  bool fence = false;

  // An atomic's operands (the value added or swapped in, the value
  // compared with) ride in two SGEs it does not use: it has one, the old
  // value's room. Every request stays as small as before atomics (a copy
  // of 16 bytes more on every post cost 3% of a 64 B WRITE's instructions).
  void set_atomic_operands(uint64_t operand, uint64_t compare) {
    local.sge[kMaxSge - 1].addr = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(operand));
    local.sge[kMaxSge - 2].addr = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(compare));
  }
  uint64_t atomic_operand() const {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(local.sge[kMaxSge - 1].addr));
  }
  uint64_t atomic_compare() const {
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(local.sge[kMaxSge - 2].addr));
  }
};
static_assert(kMaxSge >= 3, "an atomic's operands need two spare SGEs");
// The verbs layer builds requests in one it keeps per QP (braid_qp::
// post_scratch) and writes every field on each post: a new field must be
// written there too (prepare_send in lib/verbs/post.cc).
static_assert(sizeof(SendRequest) == 144, "write the new SendRequest field in prepare_send");

// What one packet carries of a queue pair's messages: part of a request
// (a work request's MSN) or of a READ response (its sequence), or nothing
// (kNop: it fills the PSN of a request the peer refused for want of a
// receive; the request goes again later under a new PSN).
enum class TxKind : uint8_t { kRequest, kReadResponse, kNop };
struct Slice {
  uint32_t seq = 0;     // MSN of the work request, or read-response sequence
  uint32_t offset = 0;  // byte offset of this packet in its message
  uint16_t len = 0;     // payload bytes
  TxKind kind = TxKind::kRequest;
};

// Why the receive side refused a packet; each maps to a NACK.
// kRemoteOp: the responder's own fault, its receive's buffer no longer in a
// region it may write (IB's remote operation error at the requester).
enum class Refusal : uint8_t { kNone, kNotReady, kAccess, kInvalid, kRemoteOp };

class QueuePair {
 public:
  // In a request's `initiator`: the message consumes a receive WQE (a SEND,
  // a WRITE with immediate data); the rest is its receive sequence number.
  static constexpr uint32_t kRsnFlag = 0x80000000u;
  // `stats` are the connection's (it outlives this).
  QueuePair(const QpConfig& cfg, ConnectionStats* stats, MemoryRegionTable* mrs,
            CompletionQueue* send_cq, CompletionQueue* recv_cq);
  // Receives it took from a shared receive queue and never used go back
  // (a queue pair destroyed without going to error first).
  ~QueuePair() {
    if (cfg_.srq != nullptr) give_back_unused();
  }
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  ConnectionState state() const { return state_; }
  const QpConfig& config() const { return cfg_; }
  MemoryRegionTable* memory() const { return mrs_; }
  // The RNR wait (the responder's timer, from its NACK): requests wait
  // until then, READ responses do not.
  TimeNs hold_until() const { return hold_until_; }
  bool held(TimeNs now) const { return now < hold_until_; }
  void hold(TimeNs until) { hold_until_ = until; }
  // Segmented and not complete: sends, or READ responses not acknowledged.
  bool has_outstanding() const { return sq_head_ != sq_tx_ || rr_head_ != rr_tx_; }
  // Work that waits for the PSNs before it: deferred tails, READs to
  // answer, a receive some of whose parts are in.
  bool in_order_pending() const {
    return tail_count_ > 0 || reads_head_ != reads_tail_ || refusal_pending_ ||
           (rq_head_ != rq_tail_ && rq_[rq_head_ & rq_mask_].any);
  }
  // A request refused for good at PSN `psn` (the earliest kept): nothing
  // of this queue pair's from it on is placed, and it ends once every
  // packet before it is in (as an IB responder, which completes what came
  // before).
  void refuse_from(uint32_t psn) {
    if (!refusal_pending_ || psn_lt(psn, refusal_psn_)) refusal_psn_ = psn;
    refusal_pending_ = true;
  }
  // Why it is about to go to its error state (the first reason stands).
  void note_fault(QpFault f) {
    if (fault_ == QpFault::kNone) fault_ = f;
  }
  // A request refused as responder: an access or invalid-request fault,
  // unless a receive of its own completes in error and says so (a message
  // too long for it: LOC_LEN_ERR; kRemoteOp: its region went).
  void note_refusal(Refusal why) {
    if (refusal_in_receive_) {
      refusal_in_receive_ = false;
      return;
    }
    if (why == Refusal::kAccess) note_fault(QpFault::kAccess);
    if (why == Refusal::kInvalid) note_fault(QpFault::kInvalid);
  }
  bool refused_from(uint32_t psn) const { return refusal_pending_ && !psn_lt(psn, refusal_psn_); }
  // Everything before the refusal is in (cack): time to end.
  bool refusal_due(uint32_t cack) const {
    return refusal_pending_ && !psn_lt(cack + 1, refusal_psn_);
  }
  void set_max_rd_atomic(uint32_t n) { cfg_.max_rd_atomic = n; }
  // Request packets of this queue pair taken as new while its connection
  // carried several queue pairs (a connection with one counts them in its
  // ConnectionStats::data_received alone).
  uint64_t requests_received() const { return requests_received_; }
  void count_request() { ++requests_received_; }
  void set_remote_access(uint32_t access) { cfg_.remote_access = access; }
  // Whether the request names this queue pair.
  bool named_by(const wire::SesRequest& s) const {
    return ((uint32_t{s.pid_on_fep} << 16) | s.resource_index) == wire_name_;
  }

  // --- requester ---
  // The checks of a post (state, room, SGEs, length); on kOk the request
  // is queued with length *length.
  PostError post_send(const SendRequest& wr, uint64_t* length);
  PostError post_recv(uint64_t wr_id, const SgList& sgl);
  // Nothing left to cut into packets: no READ response, no request (fenced
  // or not), no part of one to send again.
  bool all_segmented() const {
    return sq_tx_ == sq_tail_ && rr_tx_ == rr_tail_ && resend_count_ == 0;
  }
  bool responses_pending() const { return rr_tx_ != rr_tail_; }
  // The next request may not start yet: it is fenced and waits for the
  // READs before it, or the send queue drains (InfiniBand's SQD state:
  // requests not started wait, and may still be posted; those started go
  // on and complete). (A part to send again goes first: its request has
  // started.)
  bool start_waits() const {
    return resend_count_ == 0 && start_gate_ > 0 && sq_tx_ != sq_tail_ &&
           !sq_[sq_tx_ & sq_mask_].started && (draining_ || sq_[sq_tx_ & sq_mask_].wr.fence);
  }
  void set_draining(bool on) {
    if (on == draining_) return;
    draining_ = on;
    if (on) {
      ++start_gate_;
    } else {
      --start_gate_;
    }
  }
  bool draining() const { return draining_; }
  // Draining, and every request started has completed: the send queue is
  // drained (SQ_DRAINED).
  bool drained() const {
    return draining_ && sq_head_ == sq_tx_ &&
           (sq_tx_ == sq_tail_ || !sq_[sq_tx_ & sq_mask_].started);
  }
  // Payload bytes of the next new packet (a READ response first).
  uint32_t next_payload_len() const;
  // Cuts the next new packet (PSN `psn`): a READ response first, then a
  // part of a request to send again, then the next request's; false when
  // none may go (nothing queued, a fence, the READ limit).
  // `requests_ok` false: READ responses only (an RNR wait).
  bool next_packet(uint32_t psn, Slice* s, bool requests_ok = true);
  // The peer refused this part of a request for want of a receive (RNR):
  // it goes again under a new PSN (next_packet), and its request does not
  // complete before. False if its request is no longer outstanding or
  // consumes no receive (only SEND, SEND_IMM and WRITE_IMM can be refused
  // so: a peer that says it of another is not believed), unless
  // `any_opcode` (a request for a queue pair the peer did not have yet).
  bool resend(const Slice& s, bool any_opcode = false);
  // A new RNR episode for the request with this MSN (low 16 bits): false
  // once it has had more than `limit` (7: no limit), IB's rnr_retry.
  bool rnr_try(uint32_t msn16, uint8_t limit);
  // The refusals the request has had so far (0: none, or no such request).
  uint8_t rnr_tries(uint32_t msn16) const {
    const SendWqe* w = const_cast<QueuePair*>(this)->wqe_for_msn(msn16);
    return w == nullptr ? 0 : w->rnr_tries;
  }
  // Whether a part of this request can go again under a new PSN.
  bool can_resend(uint32_t msn16) const;
  // Before a packet is written: where a READ response's bytes come from
  // (resolved again every time: the region may have gone), its payload
  // length (0 when the response now carries an error), and its SES
  // return code.
  struct Source {
    const uint8_t* read_src = nullptr;
    uint32_t payload_len = 0;
    uint8_t read_rc = 0;
  };
  Source source(const Slice& s);
  // Writes the packet's SES header at `ses_at` and its payload after it,
  // or points `*in_place` at the payload (when `by_reference`: one piece of
  // memory, kExternalPayloadMin bytes or more) and writes none. Returns
  // whether it is a READ request (the requester's READ timer starts).
  static constexpr uint32_t kExternalPayloadMin = 1024;
  size_t ses_size(const Slice& s) const {
    return s.kind == TxKind::kReadResponse ? wire::kSesResponseDataSize
                                           : wire::kSesStandardSize;  // a NOP's too
  }
  bool write_packet(const Slice& s, const Source& src, uint32_t job_id, bool by_reference,
                    uint8_t* ses_at, const uint8_t** in_place) const;
  uint32_t outstanding_sends() const { return sq_tail_ - sq_head_; }
  // Requests posted and not yet segmented into packets (none sent yet).
  uint32_t unsegmented() const { return sq_tail_ - sq_tx_; }
  uint32_t next_msn() const { return sq_tail_; }
  uint32_t posted_recvs() const { return rq_tail_ - rq_head_; }
  uint32_t reads_outstanding() const { return reads_outstanding_; }
  // When a READ of it last went or got response data (several queue
  // pairs: each one's READs are timed on their own).
  TimeNs read_heard_at() const { return read_heard_at_; }
  // The request PSN of its oldest READ still waiting for data.
  bool oldest_read_psn(uint32_t* psn) const;
  void note_read_heard(TimeNs now) { read_heard_at_ = now; }
  // READs were outstanding when it stopped: their responses (which name
  // its slot) may still come.
  bool abandoned_reads() const { return abandoned_reads_ || reads_outstanding_ > 0; }
  // Where the READs outstanding of every queue pair on its connection are
  // summed (the connection's READ timer asks on every ACK: no walk over
  // thousands of queue pairs).
  void set_reads_sum(uint32_t* sum) {
    *sum += reads_outstanding_;
    reads_sum_ = sum;
  }
  // Requests posted, or READs answered, ever (the send PSN is then fixed).
  bool posted_any() const { return sq_tail_ != 0; }
  bool answered_reads() const { return rr_tail_ != 0; }
  // The message id of the first READ segmented and not complete, if the
  // oldest such request is a READ (a responder that answered in RTR).
  bool first_read(uint16_t* message_id) const;
  // Completions of requests everything of which the peer has acknowledged
  // (below snd_una), in order; READs once their data is in.
  WcStatus complete_sends(uint32_t snd_una);
  // The request with this MSN (its low 16 bits) was refused by the peer:
  // it fails once it is the oldest. kSuccess, or the error to stop on.
  WcStatus fail_request(uint32_t msn, WcStatus status, uint32_t snd_una);
  // READ responses wholly acknowledged leave their queue; READs waiting
  // for room start.
  void release_read_responses(uint32_t snd_una, uint32_t cack);
  // READs accepted and not yet wholly answered.
  bool reads_pending() const { return reads_head_ != reads_tail_ || rr_head_ != rr_tail_; }
  // The error state: completions as InfiniBand's (connection.h set_error),
  // every queue flushed.
  void flush(WcStatus status, uint32_t snd_una);
  // Taken off its connection (Connection::remove_queue_pair): flushed into
  // `sink` rather than its completion queues, which may go before the
  // connection does.
  void remove(CompletionQueue* sink, uint32_t snd_una) {
    send_cq_ = recv_cq_ = sink;
    removed_ = true;
    cfg_.on_error = nullptr;  // taken off (RESET, destroy): no error of its own to tell
    flush(WcStatus::kWrFlushErr, snd_una);
  }
  bool removed() const { return removed_; }
  // Outstanding work requests using lkey fail with LOC_PROT_ERR (dereg_mr).
  bool revoke_local_key(uint32_t lkey);

  // --- responder ---
  // Places a request (cack: what is held in order) or a READ response.
  // place_request is inline (below the class): the common packet, a WRITE,
  // is placed without a call; other requests go to place_request_other.
  [[gnu::always_inline]] bool place_request(const wire::ParsedPacket& pkt, uint32_t cack,
                                            Refusal* why);
  bool place_read_response(const wire::ParsedPacket& pkt, Refusal* why);
  // Everything up to cack is in: deferred tails placed, receives complete,
  // READs executed. kSuccess, or the error to stop on (a full CQ).
  // Inline: most packets (WRITEs with no receive waiting) find nothing to do.
  WcStatus on_in_order(uint32_t cack) {
    if (tail_count_ == 0 && rq_head_ == rq_tail_ && reads_head_ == reads_tail_) {
      return WcStatus::kSuccess;
    }
    return in_order_work(cack);
  }

  size_t memory_footprint() const;

 private:
  struct SendWqe {
    SendRequest wr;
    uint64_t length = 0;
    uint32_t msn = 0;
    uint32_t rsn = 0;      // receive sequence number, for receive-consuming ops
    uint32_t resends = 0;  // its parts waiting to go again (resend())
    uint32_t last_psn = 0;
    uint64_t bytes_sent = 0;  // segmentation cursor
    uint64_t read_bytes = 0;  // READ: response bytes placed
    bool started = false;     // first packet has a PSN
    bool segmented = false;   // every packet has a PSN
    bool read_done = false;   // READ: every response byte placed
    bool failed = false;      // the peer refused it: completes with fail_status
    WcStatus fail_status = WcStatus::kSuccess;
    uint8_t rnr_tries = 0;  // RNR episodes it has had
    // Fills the entry in place for a new request: `*this = SendWqe{}`
    // built a 160-byte temporary, zeroed it with a slow `rep stos` and
    // copied it, on every post (a tenth of a 64 B WRITE's sender time).
    void start(const SendRequest& r, uint64_t len, uint32_t msn_, uint32_t rsn_) {
      wr = r;
      length = len;
      msn = msn_;
      rsn = rsn_;
      resends = last_psn = 0;
      bytes_sent = read_bytes = 0;
      started = segmented = read_done = failed = false;
      fail_status = WcStatus::kSuccess;
      rnr_tries = 0;
    }
  };
  // start() resets every field: a field added must be reset there too.
  static_assert(sizeof(SendWqe) == 192, "reset the new SendWqe field in SendWqe::start");
  // A READ being answered. The source is resolved again for every packet
  // built, first transmissions and retransmissions alike: the region may be
  // deregistered or lose REMOTE_READ while the response is under way.
  struct ReadResponse {
    uint32_t rkey = 0;
    uint64_t addr = 0;
    uint32_t length = 0;
    uint32_t bytes_sent = 0;
    uint16_t message_id = 0;  // the READ's
    uint16_t requester = 0;   // the requester's slot: the response's message_id
    uint8_t return_code = wire::kSesRcOk;
    uint32_t last_psn = 0;
    bool segmented = false;
    // An atomic's answer: the target's old value (big-endian), taken once
    // when it ran; sent again as it is if its packet is lost.
    bool atomic = false;
    uint8_t old_value[8] = {};
  };
  struct RecvWqe {
    uint64_t wr_id = 0;
    SgList sgl;
    uint64_t length = 0;
    // The newest PSN of its message's parts taken, and their bytes: it
    // completes once every byte is in and everything up to that PSN (a
    // part refused for want of this receive comes again under a new PSN,
    // after its message's last).
    uint32_t last_psn = 0;
    uint32_t placed = 0;
    uint32_t byte_len = 0;
    uint32_t imm = 0;
    bool has_imm = false;
    bool eom_seen = false;
    bool rdma_imm = false;
    bool any = false;  // a part taken (last_psn is set)
    WcStatus status = WcStatus::kSuccess;
    // Fills the entry in place for a new receive (as SendWqe::start).
    void start(uint64_t id, const SgList& l) {
      wr_id = id;
      sgl = l;
      length = l.total_length();
      last_psn = placed = byte_len = imm = 0;
      has_imm = eom_seen = rdma_imm = any = false;
      status = WcStatus::kSuccess;
    }
  };
  static_assert(sizeof(RecvWqe) == 144, "reset the new RecvWqe field in RecvWqe::start");
  struct PendingRead {
    uint32_t psn = 0;
    uint16_t message_id = 0;
    uint16_t requester = 0;  // the requester's slot (its `initiator`)
    uint32_t rkey = 0;
    uint64_t addr = 0;
    uint32_t length = 0;
    uint8_t atomic = 0;  // wire::kSesAtomic* (0: a READ)
    uint64_t operand = 0;
    uint64_t compare = 0;
  };
  // The last bytes of a multi-packet WRITE that arrived before the rest of
  // its message: placed once every packet before it has been (a program
  // polling a message's last byte must not see it before the others), in
  // PSN order; bytes a later WRITE places over them meanwhile are kept
  // here too, so the later WRITE still wins.
  static constexpr uint32_t kTailBytes = 64;  // a cache line
  struct DeferredTail {
    uint32_t psn = 0;
    uint32_t rkey = 0;
    uint64_t addr = 0;
    const uint8_t* local = nullptr;  // where it goes (for overlaps; resolved again to write)
    uint8_t len = 0;
    uint8_t bytes[kTailBytes];
  };

  // The queues start with this many entries and double when full, up to
  // the configured depths (ring.h).
  static constexpr uint32_t kInitialQueueEntries = 16;

  void push_send_completion(SendWqe& w, WcStatus status, WcStatus* err);
  // The payload of an atomic request of this opcode (0: not an atomic).
  static size_t atomic_payload(Opcode op);
  WcStatus complete_recvs(uint32_t cack);
  WcStatus in_order_work(uint32_t cack);
  // The outstanding work request whose MSN has these low 16 bits
  // (nullptr: none). The send queue is at most 32768 deep.
  SendWqe* wqe_for_msn(uint32_t msn16);
  // The receive a request consuming one names. *done: it has completed
  // (the request, sent again, was placed before: not placed again).
  bool receive_slot(uint32_t initiator, uint32_t* rsn, bool* done, Refusal* why);
  // Takes receives from the shared receive queue for every RSN up to
  // `rsn` (false: it has too few, or the peer names one further ahead than
  // it could have sent).
  bool bind_shared(uint32_t rsn);
  // A receive whose region went (dereg_mr: LOC_PROT_ERR), or that a
  // message did not fit (LOC_LEN_ERR), takes no byte: its message fails.
  bool usable_receive(uint32_t rsn, Refusal* why) {
    if (rq_[rsn & rq_mask_].status == WcStatus::kSuccess) return true;
    refusal_in_receive_ = true;
    return refused_invalid(why);
  }
  // Receives bound and never used go back to the shared receive queue
  // (flush).
  void give_back_unused();
  static bool unused(const RecvWqe& w) { return !w.any && w.status == WcStatus::kSuccess; }
  static void note_receive(RecvWqe& w, const wire::SesRequest& s, uint32_t psn, uint32_t len,
                           bool rdma_imm);
  void execute_reads(uint32_t cack);
  void execute_atomic(const PendingRead& pr, uint8_t* target, ReadResponse* job);
  // Holds back the last bytes of a WRITE's last packet that came before the
  // rest of its message (`dst`: where its payload goes); returns the bytes
  // to place now.
  // A request or response refused as invalid, or for its access: counted,
  // *why set; false.
  bool refused_invalid(Refusal* why) {
    ++stats_->invalid_requests;
    *why = Refusal::kInvalid;
    return false;
  }
  // The buffers of a receive, checked when its message first uses it (as
  // a NIC checks a receive's keys, not when it is posted): each in a region
  // of this queue pair's PD with LOCAL_WRITE (ibv_rereg_mr and dereg_mr
  // may have changed it since). Key 0 is no region's: a buffer the core's
  // own user vouches for (the verbs layer refuses it at post).
  bool receive_buffers_usable(const SgList& l) const {
    for (uint8_t i = 0; i < l.num; ++i) {
      const Sge& e = l.sge[i];
      uint8_t* p = nullptr;
      if (e.length > 0 && e.lkey != 0 &&
          (mrs_->resolve(e.lkey, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(e.addr)),
                         e.length, kAccessLocalWrite, cfg_.pd, &p) != AccessError::kNone ||
           p != e.addr)) {
        return false;
      }
    }
    return true;
  }
  bool refused_access(Refusal* why) {
    ++stats_->access_errors;
    *why = Refusal::kAccess;
    return false;
  }
  // The bytes the message's next packet will place after this one's (len
  // at msg_offset), to ask for ahead (prefetch_for_write): none after its
  // last. (msg_offset + len <= request_length: place_request checked it.)
  static uint32_t next_packet_bytes(const wire::SesRequest& s, uint32_t msg_offset, uint32_t len) {
    return s.eom() ? 0 : std::min(len, s.request_length - msg_offset - len);
  }
  // A request other than a WRITE, its payload checked to lie inside its
  // message (at msg_offset).
  bool place_request_other(const wire::ParsedPacket& pkt, uint32_t msg_offset, Refusal* why);
  // A READ or an atomic accepted: it waits for its PSN to be in order.
  bool accept_read(const wire::ParsedPacket& pkt, uint8_t atomic_code, uint64_t operand,
                   uint64_t compare, Refusal* why);
  [[gnu::noinline]] uint32_t defer_tail(const wire::ParsedPacket& pkt, uint8_t* dst);
  // Bytes [dst, dst + len) of the packet `psn` are being placed while tails
  // are held: older tails they overlap take the newer bytes.
  [[gnu::noinline]] void update_held_tails(uint32_t psn, const uint8_t* dst, const uint8_t* src,
                                           uint32_t len);
  // Places the deferred tails of messages now wholly in order.
  void place_deferred_tails(uint32_t cack);

  QpConfig cfg_;
  // The two 12-bit halves of qp_num, as a request names them (named_by).
  uint32_t wire_name_ = ((cfg_.qp_num >> 12) & 0xfff) << 16 | (cfg_.qp_num & 0xfff);
  ConnectionStats* stats_;
  uint64_t requests_received_ = 0;
  MemoryRegionTable* mrs_;
  CompletionQueue* send_cq_;
  CompletionQueue* recv_cq_;
  ConnectionState state_ = ConnectionState::kActive;
  bool removed_ = false;
  TimeNs hold_until_ = 0;
  bool refusal_pending_ = false;
  uint32_t refusal_psn_ = 0;
  QpFault fault_ = QpFault::kNone;
  bool refusal_in_receive_ = false;  // the refusal being made fails a receive of ours

  // Requester.
  std::vector<SendWqe> sq_;
  uint32_t sq_mask_;
  uint32_t sq_head_ = 0;  // oldest not completed (MSN)
  uint32_t sq_tx_ = 0;    // next to segment
  uint32_t sq_tail_ = 0;  // next free
  uint32_t next_rsn_ = 0;
  uint32_t reads_outstanding_ = 0;
  bool draining_ = false;  // SQD: requests not started wait
  // reads_outstanding_, plus 1 while draining: nonzero when the next
  // request may have to wait (a fence, SQD), one test on every packet.
  uint32_t start_gate_ = 0;
  bool abandoned_reads_ = false;
  TimeNs read_heard_at_ = 0;
  uint32_t own_reads_sum_ = 0;
  uint32_t* reads_sum_ = &own_reads_sum_;
  // Parts of requests refused for want of a receive, to send again (at
  // most one per PSN in the window; grows on first use).
  std::vector<Slice> resend_;
  uint32_t resend_head_ = 0, resend_count_ = 0;
  // Responder: READ responses being sent, and READs accepted, not yet begun.
  std::vector<ReadResponse> rr_;
  uint32_t rr_mask_;
  uint32_t rd_cap_ = 1;  // the rings' largest size: max_dest_rd_atomic, a power of two
  void grow_read_rings();
  uint32_t rr_head_ = 0, rr_tx_ = 0, rr_tail_ = 0;
  std::vector<PendingRead> reads_;
  uint32_t reads_head_ = 0, reads_tail_ = 0;
  std::vector<RecvWqe> rq_;
  uint32_t rq_mask_;
  uint32_t rq_head_ = 0;             // oldest not completed (RSN)
  uint32_t rq_tail_ = 0;             // next to post
  std::vector<DeferredTail> tails_;  // grows the first time tails wait (at most a window's)
  uint32_t tail_count_ = 0;
};

inline bool QueuePair::place_request(const wire::ParsedPacket& pkt, uint32_t cack, Refusal* why) {
  const wire::SesRequest& s = pkt.ses;
  const uint32_t len = pkt.payload_len;
  const uint32_t msg_offset = s.som() ? 0 : s.message_offset;
  // WRITE and SEND payloads must lie inside the message they claim to be of.
  // The last packet of a message of several that came before the rest of
  // it: a WRITE's last bytes wait for them (defer_tail).
  bool tail_first = false;
  // (READs and atomics carry no part of the message they name.)
  if (s.opcode != static_cast<uint8_t>(wire::SesOpcode::kRead) &&
      s.opcode != static_cast<uint8_t>(wire::SesOpcode::kFetchAtomic)) {
    if (uint64_t{msg_offset} + len > s.request_length) return refused_invalid(why);
    if (!s.som()) {
      if (s.payload_length != len) return refused_invalid(why);
      tail_first = s.eom() && pkt.req.psn != cack + 1;
    }
    if (s.eom() && uint64_t{msg_offset} + len != s.request_length) return refused_invalid(why);
  }

  if (s.opcode != static_cast<uint8_t>(wire::SesOpcode::kWrite)) [[unlikely]] {
    return place_request_other(pkt, msg_offset, why);
  }
  // The QP's own access first (IB: a QP without REMOTE_WRITE refuses
  // every WRITE, whatever the region allows).
  if (!(cfg_.remote_access & kAccessRemoteWrite)) return refused_access(why);
  const bool imm = s.initiator & kRsnFlag;
  uint32_t rsn = 0;
  bool done = false;
  if (imm && !receive_slot(s.initiator, &rsn, &done, why)) return false;
  if (done) return true;
  // A zero-length WRITE (a WRITE_IMM doorbell) touches no memory: no key
  // check, as InfiniBand.
  if (s.request_length == 0) {
    if (imm) note_receive(rq_[rsn & rq_mask_], s, pkt.req.psn, len, true);
    return true;
  }
  if (s.memory_key > 0xffffffffu || s.buffer_offset < msg_offset) return refused_access(why);
  // Every packet checks the whole message's range, as an RC responder does
  // on the first packet: a message that overruns the region places nothing.
  uint8_t* base = nullptr;
  if (mrs_->resolve(static_cast<uint32_t>(s.memory_key), s.buffer_offset - msg_offset,
                    s.request_length, kAccessRemoteWrite, cfg_.pd, &base) != AccessError::kNone) {
    return refused_access(why);
  }
  uint32_t now_len = len;
  if (tail_first) [[unlikely]]
    now_len = defer_tail(pkt, base + msg_offset);
  if (tail_count_ > 0 && now_len > 0) [[unlikely]] {
    update_held_tails(pkt.req.psn, base + msg_offset, pkt.payload, now_len);
  }
  copy_payload(base + msg_offset, pkt.payload, now_len);
  // The next packet's destination, within the message (whose whole range
  // the key allowed).
  prefetch_for_write(base + msg_offset + len, next_packet_bytes(s, msg_offset, len));
  stats_->bytes_placed += len;
  if (imm) note_receive(rq_[rsn & rq_mask_], s, pkt.req.psn, len, true);
  return true;
}

}  // namespace braid

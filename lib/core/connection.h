// One reliable connection (a UET PDC carrying one RC queue pair): both
// directions of PSN reliability, entropy per packet, the congestion window
// and credit; the queue pair (queue_pair.h: segmentation, placement, RC
// completion order) runs on it.
//
// Sans-IO: the owner hands it decoded packets and the time, and asks it for
// frames to send; timers live on the owner's TimingWheel. It allocates only
// when constructed. Files: connection.cc (work requests, completions,
// errors, timers), connection_tx.cc (sending, retransmission),
// connection_rx.cc (receive path), connection_ack.cc (ACK
// generation, ACK/NACK processing, loss detection).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/completion_queue.h"
#include "core/congestion_control.h"
#include "core/connection_stats.h"
#include "core/credit.h"
#include "core/memory_table.h"
#include "core/path_set.h"
#include "core/peer_congestion.h"
#include "core/queue_pair.h"
#include "core/ready_queue.h"
#include "core/receive_window.h"
#include "core/ring.h"
#include "core/rtt.h"
#include "core/sg_list.h"
#include "core/timing_wheel.h"
#include "core/types.h"
#include "wire/frame.h"

namespace braid {

struct ConnectionConfig {
  uint16_t local_id = 0;    // our PDC id (spdcid on what we send; the endpoint's key)
  uint16_t remote_id = 0;   // the peer's PDC id
  uint32_t qp_num = 0;      // reported in work completions; requests must name it
  uint32_t remote_qpn = 0;  // the peer's QP: named in our requests (24 bits)
  wire::MacAddr local_mac{};
  wire::MacAddr remote_mac{};
  uint32_t local_ip = 0;
  uint32_t remote_ip = 0;
  uint16_t udp_port = wire::kUetUdpPort;
  uint32_t tx_psn = 0;             // first PSN we send
  uint32_t rx_psn = 0;             // first PSN the peer sends
  uint32_t pd = 0;                 // protection domain for remote accesses
  uint32_t mtu = 4096;             // payload bytes per packet
  uint32_t window_packets = 1024;  // PSNs tracked each way: power of two, 128..16384
  uint32_t sq_depth = 256;         // power of two, at most 32768
  uint32_t rq_depth = 256;         // power of two, at most 2^20
  // Receives come from this shared receive queue, not post_recv (QpConfig).
  SharedReceiveQueue* srq = nullptr;
  // Its queue pair's error hook (QpConfig).
  QpErrorHook on_error = nullptr;
  void* on_error_arg = nullptr;
  // The transmit window's records and the queues start small and double on
  // first use up to window_packets and the depths: an idle QP holds a few
  // KiB (thousands of QPs on a device). false: all at full size from the
  // start, so that nothing is ever allocated after creation.
  bool grow_rings = true;
  // READs this end has outstanding at most (IB's max_rd_atomic, at RTS),
  // and READs it accepts from the peer at once (max_dest_rd_atomic, at
  // RTR; 0: none). A READ beyond what the responder accepts is refused
  // there as an invalid request, as an InfiniBand responder does.
  uint32_t max_rd_atomic = 16;
  uint32_t max_dest_rd_atomic = 16;
  uint32_t ack_every = 8;        // coalesce up to this many packets per ACK
  TimeNs ack_delay_ns = 10'000;  // ... or this long
  // A software stack shares cores: a peer descheduled for a millisecond or
  // a TX ring a thousand frames deep must not look like loss (SACKs and
  // per-path gaps find real loss long before the timer).
  TimeNs rto_initial_ns = 2'000'000;
  TimeNs rto_min_ns = 2'000'000;
  TimeNs rto_max_ns = 50'000'000;
  uint8_t retry_limit = 7;      // retransmissions of one packet before RETRY_EXC_ERR
  uint8_t rnr_retry_limit = 7;  // 7 = infinite, as in InfiniBand
  // InfiniBand's local ACK timeout 0: wait for the peer forever (the RTO
  // still backs off to rto_max_ns), never RETRY_EXC_ERR.
  bool retry_forever = false;
  // This end's minimum RNR timer (IB's min_rnr_timer, a responder's
  // attribute): the wait a peer is told in the RNR NACK when its request
  // finds no receive posted. A requester waits what the NACK says (this
  // value only when a NACK names none).
  TimeNs rnr_delay_ns = 100'000;
  // Remote operations this QP accepts as a responder (IB's qp_access_flags:
  // kAccessRemoteWrite, kAccessRemoteRead); the region's own access is
  // checked as well.
  uint32_t remote_access = kAccessRemoteWrite | kAccessRemoteRead;
  // The longest the peer's engine may hold an ACK it was asked for at once,
  // waiting for the application's answer to leave with it (the verbs
  // progress thread's hold): the tail-loss probe waits for it too.
  TimeNs peer_ack_hold_ns = 0;
  uint32_t path_reorder_threshold = 1;  // later packets acked on the same entropy => loss
  bool crc_trailer = false;
  // Authenticated mode (TSS): every packet sealed with AES-256-GCM under
  // keys derived from this secret for each direction (wire/tss.h), and only
  // sealed packets that authenticate are taken. No CRC trailer then.
  bool auth = false;
  wire::TssSecret auth_secret{};
  uint32_t auth_sdi = 0;                 // the security header's SDI (24 bits)
  std::array<uint8_t, 16> auth_nonce{};  // agreed by both ends for this connection
  uint8_t trim_dscp = 0xff;              // DSCP a trimming switch puts on cut packets
  // The peer's MAC is not known yet (ARP under way): nothing is sent until
  // set_remote_mac(). An RC QP reaches RTR with a GID, not a MAC.
  bool await_remote_mac = false;
  // A PDC that the queue pairs of a device to one peer share (verbs'
  // shared_pdc). Its ids on the wire are the QP numbers of one of its queue
  // pairs and that queue pair's peer, so that nothing but QP numbers and
  // PSNs needs exchanging out of band: the ids it names are those of its
  // first queue pair to send (speak_as), and the peer's are learnt from the
  // peer's first data, which names one of this PDC's queue pairs; that
  // queue pair's rx_psn says where the peer's PSNs start. The endpoint
  // takes a packet on any of its queue pairs' numbers from that queue
  // pair's peer (Endpoint::attach_queue_pair). No auth.
  bool shared = false;
  EntropyConfig entropy;
  CcConfig cc;
};

// The SES job id on every data packet of one direction: 24 bits mixed from
// the PSN that direction started at, both PDC ids and both addresses. A
// receiver takes data only with its direction's id, so a stranger guessing
// into the PSN window must also guess the start PSN exactly: RoCEv2's work
// factor (docs/security.md) although any PSN in the window is accepted.
uint32_t direction_job_id(uint32_t start_psn, uint16_t src_id, uint16_t dst_id, uint32_t src_ip,
                          uint32_t dst_ip);

// A received packet asked for an ACK at once: counted (a statistic), and
// flagged until the owner takes the flag (the engine then holds its
// transmit step a moment, so the ACK leaves with the application's answer).
struct AckAsked {
  uint64_t count = 0;
  bool pending = false;
  void note() {
    ++count;
    pending = true;
  }
  bool take() {
    const bool was = pending;
    pending = false;
    return was;
  }
};

// One frame to build (into buf, at most cap bytes), and what its builder
// says of it besides the length, so that whoever sends it parses nothing
// of it again: a payload left where it lies (registered memory) instead of
// copied after the headers, and where the frame goes.
struct TxOut {
  uint8_t* buf = nullptr;
  uint32_t cap = 0;
  // The sender can send a payload from where it lies: the frame is then
  // the bytes written into buf followed by payload_len bytes at payload.
  bool in_place_ok = false;
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;  // 0: the whole frame is in buf
  uint32_t dst_ip = 0;       // the frame's destination address
  uint16_t dst_pdc = 0;      // ... and the PDC id it names there
};

class Connection {
 public:
  // `peer`: the congestion state it shares with the other connections to
  // the same peer (nullptr: a state of its own).
  Connection(const ConnectionConfig& cfg, MemoryRegionTable* mrs, CompletionQueue* send_cq,
             CompletionQueue* recv_cq, TimingWheel* wheel, PeerCongestion* peer = nullptr);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sets the first PSN this side sends (an RC QP learns it at RTS). Only
  // before anything has been sent; returns false otherwise.
  bool set_send_psn(uint32_t psn);
  // A shared PDC: the queue pair in `slot` reached RTS with send PSN `psn`.
  // The first to do so before anything was sent names the PDC on the wire
  // from then on (its QP number, its peer's) and starts its PSNs at `psn`;
  // later ones change nothing (their PSNs are not used: docs/ibverbs.md).
  void speak_as(uint16_t slot, uint32_t psn);
  // The ids this end names on the wire (spdcid, dpdcid): the config's, or
  // those of the queue pair a shared PDC speaks as.
  uint16_t wire_id() const { return name_src_; }
  uint16_t wire_remote() const { return name_dst_; }
  // The ids the peer names (its spdcid, the dpdcid it sends to).
  uint16_t peer_wire_id() const { return peer_src_; }
  uint16_t peer_wire_remote() const { return peer_dst_; }
  // A shared PDC has learnt which of its queue pairs the peer names (any
  // other connection knows from the start).
  bool peer_named() const { return peer_named_; }
  // The source PDC id the peer's packets carry to this connection's own
  // pair once its names are known; before, a value no id has.
  uint32_t named_src() const { return named_src_; }
  bool shared() const { return cfg_.shared; }
  void set_remote_mac(const wire::MacAddr& mac);
  bool has_remote_mac() const { return mac_known_; }
  // READs this end may have outstanding (ConnectionConfig::max_rd_atomic).
  void set_max_rd_atomic(uint32_t n) {
    cfg_.max_rd_atomic = std::max<uint32_t>(n, 1);
    qp_.set_max_rd_atomic(cfg_.max_rd_atomic);
  }
  // Retry and timer settings an RC QP may change at RTS (and after).
  void set_retry(uint8_t retry_limit, uint8_t rnr_retry_limit, TimeNs rto_max_ns,
                 bool retry_forever);
  // The RNR wait this end asks peers for (ConnectionConfig::rnr_delay_ns).
  void set_min_rnr_delay(TimeNs ns) { cfg_.rnr_delay_ns = ns; }
  // Remote operations accepted from now on (ConnectionConfig::remote_access).
  void set_remote_access(uint32_t access) {
    cfg_.remote_access = access;
    qp_.set_remote_access(access);
  }
  // The same for the queue pair in `slot` alone.
  void set_max_rd_atomic(uint16_t slot, uint32_t n) {
    if (slot == 0) return set_max_rd_atomic(n);
    qps_[slot]->set_max_rd_atomic(std::max<uint32_t>(n, 1));
  }
  void set_remote_access(uint16_t slot, uint32_t access) {
    if (slot == 0) return set_remote_access(access);
    qps_[slot]->set_remote_access(access);
  }

  PostError post_send(const SendRequest& wr) { return post_send(0, wr); }
  PostError post_recv(uint64_t wr_id, const SgList& sgl) { return post_recv(0, wr_id, sgl); }

  // Several queue pairs on this connection (one PDC): the connection's
  // own is slot 0; add_queue_pair gives another its slot (kNoSlot: its QP
  // number is taken, or the table is full). Each has its own queues,
  // completion queues, RC order and RNR wait; they share the PSN spaces,
  // the window, the paths and the ACKs. Requests name their queue pair by
  // QP number (QpConfig::qp_num, the peer's remote_qpn). A queue pair
  // stays until the connection goes. An error of one queue pair's own
  // (a CQ overrun, a refused request, RNR retries spent) flushes it
  // alone; one of the PDC's (retries spent, a request this end refused)
  // flushes them all.
  static constexpr uint16_t kNoSlot = 0xffff;
  uint16_t add_queue_pair(QpConfig q, CompletionQueue* send_cq, CompletionQueue* recv_cq);
  // The connection's own queue pair's settings, with another QP number:
  // a template for add_queue_pair.
  QpConfig queue_pair_config(uint32_t qp_num, uint32_t remote_qpn) const {
    QpConfig q = qp_.config();
    q.qp_num = qp_num;
    q.remote_qpn = remote_qpn & 0xffffff;
    q.on_error = nullptr;  // the first queue pair's: the caller sets its own
    q.on_error_arg = nullptr;
    return q;
  }
  const QueuePair& queue_pair(uint16_t slot) const { return *qps_[slot]; }
  QueuePair& queue_pair(uint16_t slot) { return *qps_[slot]; }
  size_t queue_pair_slots() const { return qps_.size(); }
  // Queue pairs not removed.
  size_t live_queue_pairs() const { return qps_.size() - removed_; }
  // Whether it has ever carried more than one queue pair: from then on each
  // counts its own requests (QueuePair::requests_received); until then the
  // connection's ConnectionStats::data_received are its one queue pair's.
  bool carried_several() const { return multi_; }
  bool removed(uint16_t slot) const { return slot < qps_.size() && qps_[slot]->removed(); }
  // Takes the queue pair in `slot` off the connection (destroy_qp), with
  // packets of it still in flight: its work requests go without
  // completions, its requests not yet acknowledged become NO_OPs, and a
  // request for it from now on is refused (its sender's queue pair ends
  // alone). Its slot goes to a later queue pair once none of its packets
  // is unacknowledged (unless it had READs outstanding, or is slot 0).
  // False: no such queue pair, or the only one left (close the
  // connection).
  bool remove_queue_pair(uint16_t slot);
  // Send queue drain (modify_qp to SQD, and back to RTS): the queue pair
  // in `slot` starts no new request while on; those started complete.
  // Off, what waited goes.
  void set_draining(uint16_t slot, bool on);
  // Draining and done: every request it had started has completed.
  bool send_queue_drained(uint16_t slot) const { return qps_[slot]->drained(); }
  // A queue pair's own error (modify_qp to ERR): it alone flushes.
  void set_queue_pair_error(uint16_t slot, WcStatus status) {
    if (!multi() && !cfg_.shared) {
      set_error(status);
      return;
    }
    go_multi();
    stop_qp_multi(slot, status);
    poke();
  }
  PostError post_send(uint16_t slot, const SendRequest& wr);
  PostError post_recv(uint16_t slot, uint64_t wr_id, const SgList& sgl);

  // A decoded packet addressed to this connection; on_data_packet for a
  // request (data) only, on_ack_packet for an ACK, without dispatching on
  // its type again.
  [[gnu::noinline]] void on_packet(const wire::ParsedPacket& pkt, TimeNs now);
  [[gnu::noinline]] void on_data_packet(const wire::ParsedPacket& pkt, TimeNs now);
  [[gnu::noinline]] void on_ack_packet(const wire::ParsedPacket& pkt, TimeNs now);
  // Write the next frame to send into buf (capacity cap) and return its
  // length, 0 when nothing may be sent now: a control frame (NACK, ACK,
  // hole ACK), or a data frame (a retransmission, a new packet or a READ
  // response; window, congestion control and pacing allowing). The
  // endpoint asks for control frames first.
  uint32_t produce_control(uint8_t* buf, uint32_t cap, TimeNs now);
  // A data frame into out.buf. With out.in_place_ok its payload may stay
  // where it is (when it lies in one piece of memory and no trailer covers
  // it): out.payload says where, and only the headers are written into buf
  // (the length returned is then theirs alone).
  uint32_t produce_data_frame(TxOut& out, TimeNs now);
  // Payloads shorter than this are copied all the same: a copy of a few
  // hundred bytes costs less than the second buffer that points at them
  // (64 B WRITEs over memif: 17% fewer messages a second in place).
  static constexpr uint32_t kExternalPayloadMin = QueuePair::kExternalPayloadMin;
  // Header bytes a packet counts in the congestion window besides its payload.
  static constexpr uint32_t kPacketCharge = 64;
  // Whether a control frame is due, and whether a data frame may be ready
  // (it may still turn out that none can go: a READ limit, an RNR wait).
  // False for data while pacing holds it back: a timer ends the wait.
  bool control_due() const;
  bool data_ready() const;
  // The congestion window, shared with the other connections to the peer,
  // has room for a full packet (or nothing is in flight: one packet always
  // goes).
  bool window_takes_full_packet() const { return peer_->window_takes_full_packet(); }
  bool wants_to_send() const { return control_due() || data_ready(); }
  // Taken off its owner's data queue: if it has data that the shared
  // window or pacing holds back, it waits for them (PeerCongestion), as
  // another connection's ACK may be what opens them.
  void park() {
    if ((retx_count_ > 0 || !at_tail()) && held_by_peer()) peer_->wait(this);
  }
  // On its owner's data queue (it queued itself to send).
  bool data_queued() const { return data_q_ != nullptr && data_q_->contains(cfg_.local_id); }
  // A shared PDC: the first data packet of the peer names (dst, src), the
  // ids of one of our queue pairs and its peer (the endpoint checked the
  // pair). Its direction's PSNs start at that queue pair's rx_psn; false
  // (dropped) when the packet does not carry that direction's job id.
  bool learn_peer_names(const wire::ParsedPacket& pkt, uint16_t dst, uint16_t src);
  // Queues the connection puts its id on whenever it may have become ready
  // to send (a post, a packet, a timer, an error): its owner's transmit
  // lists. An owner that polls every connection needs none.
  void set_ready_queues(ReadyQueue* control, ReadyQueue* data) {
    control_q_ = control;
    data_q_ = data;
  }
  // Receiver-driven credit: the pacer of the endpoint this connection
  // receives on (its turns are the endpoint's), and one of its turns: take
  // up to max_bytes of the peer's demand as credit. Returns what was
  // granted; *more says whether demand is left.
  // With a peer shared with other connections, the pacer's turns are the
  // peer's (PeerCongestion::take_turn), else this connection's own.
  void set_credit_pacer(CreditPacer* p) {
    if (own_peer_) {
      grantor_.bind(p, cfg_.local_id, cfg_.cc.link_bps);
      return;
    }
    grantor_.bind(p, peer_->turn_id(), cfg_.cc.link_bps, &Connection::join_peer_turns, this);
  }
  uint32_t grant_credit(uint32_t max_bytes, bool* more, TimeNs now);
  // cc.credit_unused_cap_bytes, and at least two of the peer's BDPs (the
  // link's rate times the base RTT) so that the cap never limits a flow.
  uint32_t credit_cap() const;
  const CreditSender& credit() const { return credit_; }
  bool uses_credit() const { return credit_on_; }
  // Earliest time pacing lets the next data packet leave (0: not paced).
  TimeNs next_send_at() const { return peer_->next_send_at(); }

  ConnectionState state() const { return state_; }
  const ConnectionStats& stats() const { return stats_; }
  const PathSet& paths() const { return paths_; }
  const CongestionControl& cc() const { return peer_->cc(); }
  // The congestion state shared with the other connections to this peer.
  const PeerCongestion& peer() const { return *peer_; }
  const ConnectionConfig& config() const { return cfg_; }
  // This connection's bytes in flight (its part of peer().inflight()).
  uint32_t inflight_bytes() const { return inflight_bytes_; }
  TimeNs srtt() const { return rtt_.srtt(); }
  TimeNs rttvar() const { return rtt_.rttvar(); }
  TimeNs min_rtt() const { return rtt_.min_rtt(); }
  // Packets sent and not yet cumulatively acknowledged.
  uint32_t unacked_packets() const { return snd_nxt_ - snd_una_; }
  uint32_t outstanding_sends() const { return qp_.outstanding_sends(); }
  // The MSN the next accepted send request gets.
  uint32_t next_msn() const { return qp_.next_msn(); }
  uint32_t posted_recvs() const { return qp_.posted_recvs(); }
  TimeNs rto_ns() const { return rtt_.rto(); }
  // Bytes of state this connection holds (for the memory-bound tests).
  size_t memory_footprint() const;
  // Moves to the error state. In order, work requests already complete
  // finish normally, one the peer refused gets its own status, otherwise the
  // oldest incomplete one gets `status`; the rest, and every receive, flush.
  void set_error(WcStatus status);
  // A local region is going away (dereg_mr): outstanding work requests that
  // would still touch it complete with LOC_PROT_ERR and the connection goes
  // to error (the rest flush), so no byte of it is read or written after.
  // False when no outstanding request uses the key.
  bool revoke_local_key(uint32_t lkey);
  // Where it tells its owner that a received packet asked for an ACK at once
  // (AckAsked).
  void set_ack_asked(AckAsked* signal) { ack_asked_ = signal; }
  // What this end received and has not acknowledged yet (a coalesced or
  // held ACK) is acknowledged with the next transmit: the process is going.
  void ack_now() {
    if (unacked_packets_ > 0) ack_due_ = true;
    poke();
  }
  // Closing (Endpoint::close_connection). Whether the peer may still wait
  // for this end's acknowledgement of what it sent: data arrived from it,
  // and it has not said it closes itself.
  bool peer_may_wait() const { return mac_known_ && stats_.data_received > 0 && !peer_closed_; }
  // The peer said it closes (its CLOSE): nothing new should join it.
  bool peer_closed() const { return peer_closed_; }
  // The CTRL CLOSE this end sends as it goes: its cumulative PSN (what it
  // received in order), so that the peer's last sends complete even when
  // the last ACK was lost. 0 when cap is too small or the MAC is unknown.
  uint32_t build_close(uint8_t* buf, uint32_t cap);
  // The ACK with the P flag that answers a peer's CLOSE.
  uint32_t build_close_answer(uint8_t* buf, uint32_t cap);

 private:
  // --- transmit side ---
  enum class TxState : uint8_t { kFree, kInFlight, kLost, kAcked };
  struct TxRecord {
    TimeNs sent_at = 0;
    uint32_t psn = 0;
    // The low 16 bits of the MSN of the work request, or of the
    // read-response sequence (a queue pair rebuilds them), and the queue
    // pair's slot (qps_).
    uint16_t seq = 0;
    uint16_t qp = 0;
    uint32_t offset = 0;    // byte offset of this packet in its message
    uint32_t path_seq = 0;  // per-entropy send sequence
    uint16_t len = 0;       // payload bytes
    uint8_t entropy = 0;    // index in paths_
    uint8_t retries = 0;    // expirations of the RTO for this packet
    uint8_t tx_count = 0;   // transmissions (RTT samples only when 1: Karn)
    TxKind kind = TxKind::kRequest;
    TxState state = TxState::kFree;
    bool queued_for_retx = false;
  };
  struct PendingNack {
    uint32_t psn = 0;
    uint8_t code = 0;
    uint8_t vendor = 0;
    uint8_t flags = 0;
    uint32_t payload = 0;  // an RNR NACK's: the wait asked for, in ns
  };
  // connection.cc
  // The queue pair found an error (other than kSuccess): the connection stops.
  void stop_on(WcStatus e) {
    if (e != WcStatus::kSuccess) set_error(e);
  }
  // ... the queue pair in `slot` did: it alone stops (the connection, if it
  // is the only one).
  void stop_qp(uint16_t slot, WcStatus e) {
    if (e == WcStatus::kSuccess) return;
    if (!multi()) {
      // A shared PDC outlives its queue pairs' errors, even its only one's:
      // the peer's PDC goes on, and new queue pairs must find this one.
      if (!cfg_.shared) {
        set_error(e);
        return;
      }
      go_multi();
    }
    stop_qp_multi(slot, e);
  }
  // Several queue pairs' ways from now on (their lists start).
  void go_multi();
  // It flushes, and its requests not yet acknowledged become NO_OPs (what
  // they carried must not be read again: the program has its buffers back).
  [[gnu::noinline]] void stop_qp_multi(uint16_t slot, WcStatus e);
  // The requests of the queue pair in `slot` not yet acknowledged become
  // NO_OPs.
  void nop_fill_requests(uint16_t slot);
  // Some queue pair answered READs (its PSNs have started).
  bool answered_reads() const;
  // Several queue pairs: a lost packet at the head of the retransmit queue
  // is a request of a queue pair in its RNR wait: the first other one goes.
  [[gnu::noinline]] uint32_t produce_retx_past_held(TxOut& out, TimeNs now);
  bool multi() const { return multi_; }
  void complete_sends() { stop_on(qp_.complete_sends(snd_una_)); }
  // snd_una_ advanced from `from`: the READ responses and sends it covers
  // complete (with several queue pairs, those of the queue pairs that had
  // packets among the PSNs now acknowledged: no other can have any).
  void after_progress(uint32_t from, TimeNs now) {
    if (!multi()) {
      release_read_responses();
      complete_sends();
      return;
    }
    after_progress_multi(from, now);
  }
  [[gnu::noinline]] void after_progress_multi(uint32_t from, TimeNs now);
  // Several queue pairs: the next new packet, its queue pair's in *slot,
  // by turns among those with something to send; false: none may go.
  bool next_new_multi(Slice* s, uint16_t* slot, TimeNs now);
  [[gnu::noinline, gnu::flatten]] uint32_t produce_new_multi(TxOut& out, TimeNs now);
  // The record `r` of the next PSN takes the new packet `slice` of the queue
  // pair in `slot`. Filled in place: a temporary copied in would stall on
  // store forwarding. The record's previous packet is below snd_una_, so
  // acknowledged.
  void take_new(TxRecord& r, const Slice& slice, uint16_t slot) {
    r.seq = static_cast<uint16_t>(slice.seq);
    r.qp = slot;
    r.offset = slice.offset;
    r.len = slice.len;
    r.kind = slice.kind;
    if (credit_on_ && r.kind == TxKind::kRequest) {
      unsent_credit_ -= std::min<uint64_t>(unsent_credit_, r.len + credit_header());
    }
    r.psn = snd_nxt_;
    r.retries = 0;
    r.tx_count = 0;
    r.queued_for_retx = false;
    ++snd_nxt_;
    ++stats_.data_sent;
  }
  // The earliest end of an RNR wait the hold timer must wake at.
  void arm_hold(TimeNs until, TimeNs now) {
    if (!hold_timer_.armed() || hold_timer_.deadline <= now || until < hold_timer_.deadline) {
      wheel_->schedule(&hold_timer_, until);
    }
  }
  // A READ outstanding on some queue pair (the READ timer runs).
  bool reads_outstanding() const;
  void arm_rto(TimeNs now);
  void on_rto(TimeNs now);
  void on_read_timeout(TimeNs now);
  // Several queue pairs: ends each one whose READs have had no response
  // data for the retry budget; whether READs are still outstanding.
  [[gnu::noinline]] bool end_stale_reads(TimeNs now);
  TimeNs stale_reads_at_ = kNever;  // no queue pair's READ goes stale before this
  // RETRY_EXC_ERR takes both a packet's retries spent and, since the peer
  // last answered, the time InfiniBand allows them: retry_limit + 1 local ACK
  // timeouts (rto_max). An adaptive RTO far below that timeout must not give
  // up on a peer, or a host, that stops for less (a descheduled process, a
  // link flap): rdma-core programs choose the timeout for that.
  TimeNs retry_budget() const { return (TimeNs{cfg_.retry_limit} + 1) * cfg_.rto_max_ns; }
  template <typename Count>
  bool retries_spent(Count* retries, TimeNs since, TimeNs now) const {
    if (*retries < 255) ++*retries;
    return !cfg_.retry_forever && *retries > cfg_.retry_limit && now - since >= retry_budget();
  }
  static void rto_thunk(Timer* t, TimeNs now);
  static void ack_thunk(Timer* t, TimeNs now);
  static void hold_thunk(Timer* t, TimeNs now);
  static void probe_thunk(Timer* t, TimeNs now);
  static void credit_thunk(Timer* t, TimeNs now);
  // Tail-loss probe: two smoothed RTTs plus twice the variation after the
  // last new packet, and the receiver's ACK delay (the packets before a
  // lost last one are ACKed only then), packets sent once and still
  // unacknowledged are resent (not counted as lost: no retry, no
  // congestion signal).
  // The peer's engine may also hold an ACK asked for at once (for the
  // application's answer): a probe before that resends what arrived.
  TimeNs probe_timeout() const {
    return 2 * rtt_.srtt() + 2 * rtt_.rttvar() + cfg_.ack_delay_ns + cfg_.peer_ack_hold_ns;
  }
  void on_probe(TimeNs now);
  friend class PeerCongestion;  // wakes its waiters (poke)
  static void join_peer_turns(void* c) {
    auto* x = static_cast<Connection*>(c);
    x->peer_->want_turns(x);
  }
  void poke() {
    if (credit_on_) credit_check();
    // What this connection did may have opened the window the others wait for.
    peer_->wake_if_open();
    if (control_q_ == nullptr) return;
    const uint16_t id = cfg_.local_id;
    if (!control_q_->contains(id) && control_due()) control_q_->push(id);
    queue_data();
  }
  // poke()'s data part: the data queue, or the peer's waiters.
  void queue_data() {
    if (control_q_ == nullptr) return;
    const uint16_t id = cfg_.local_id;
    // Nothing queued to send (a receiver's usual case) needs no closer look.
    const bool work = retx_count_ > 0 || !at_tail();
    if (work && !data_q_->contains(id)) {
      if (data_ready()) {
        data_q_->push(id);
      } else if (held_by_peer()) {
        peer_->wait(this);  // woken when the shared window or pacing opens
      }
    }
  }
  // Only an active connection waits for the peer's window: one in error
  // sends no data again.
  bool held_by_peer() const {
    return state_ == ConnectionState::kActive && mac_known_ &&
           (peer_->pace_armed() || !window_takes_full_packet());
  }
  // Bytes in flight, counted here and in the peer's shared window.
  void add_inflight(uint32_t bytes) {
    inflight_bytes_ += bytes;
    peer_->add_inflight(bytes);
  }
  void sub_inflight(uint32_t bytes) {
    inflight_bytes_ -= bytes;
    peer_->sub_inflight(bytes);
  }
  // Receiver-driven credit, sender's half: a CREDIT_REQ is due when the
  // demand grew (connection.cc).
  void credit_check();
  // How long a connection waits for credit before asking again: a few
  // round trips, and a few of the gaps at which grants have been coming
  // (a receiver shared by many senders grants each one seldom).
  TimeNs first_credit_wait() const {
    return std::max<TimeNs>({4 * rtt_.srtt(), 50'000, 4 * grant_gap_});
  }
  // A packet's frame on the wire, as credit counts it, before its payload.
  uint32_t credit_header() const {
    return static_cast<uint32_t>(wire::kL2L4Size + wire::kRequestSize + wire::kSesStandardSize +
                                 trailer());
  }
  // Credit stops a packet of this kind now (a retransmission needs credit,
  // a new packet credit or speculative allowance; READ responses none).
  bool credit_holds(const TxRecord& r, bool retx) const {
    return credit_on_ && r.kind == TxKind::kRequest && !credit_.may_send(retx);
  }
  void on_credit_ctrl(const wire::ParsedPacket& pkt, TimeNs now);
  uint32_t build_credit_ctrl(uint8_t* buf, uint32_t cap, wire::CtrlType type, uint32_t value);
  // Nothing new to send (every request and READ response segmented): the
  // packets in flight are the tail.
  // (Requests waiting in SQD count as queued: the last packet of the drain
  // does not ask for its ACK, which the peer then sends within its ACK
  // delay, ack_delay_ns. Checking for it here cost every packet.)
  bool at_tail() const { return multi() ? sending_.empty() : qp_.all_segmented(); }
  // The peer refused the request packet `r`: its work request fails once it
  // is the oldest (earlier ones still complete normally).
  void fail_request(const TxRecord& r, WcStatus status) {
    stop_qp(r.qp, qp_of(r).fail_request(r.seq, status, snd_una_));
  }
  // Nothing sent yet: the first PSN this side sends is `psn` (the job id
  // follows it and the names).
  void start_sending_at(uint32_t psn);
  // connection_tx.cc
  void set_names(uint16_t src, uint16_t dst) {
    name_src_ = src;
    name_dst_ = dst;
  }
  uint32_t build_data(TxOut& out, TxRecord& r, bool retx, TimeNs now);
  template <bool kTable>
  uint32_t build_data_with(TxOut& out, TxRecord& r, bool retx, TimeNs now);
  // Out of the flattened path: another queue pair's packet.
  [[gnu::noinline, gnu::flatten]] uint32_t build_data_other(TxOut& out, TxRecord& r, bool retx,
                                                            TimeNs now);
  static uint32_t charge(const TxRecord& r) { return r.len + kPacketCharge; }
  // Retransmissions first, then new packets. The common case (nothing to
  // resend, no RNR wait) goes straight to produce_new: a call of its own
  // in between cost a 64 B WRITE some 10 instructions of calls.
  uint32_t produce_data(TxOut& out, TimeNs now) {
    if (retx_count_ > 0 || (!multi() && qp_.held(now))) [[unlikely]]
      return produce_data_slow(out, now);
    return produce_new(out, now);
  }
  [[gnu::noinline]] uint32_t produce_data_slow(TxOut& out, TimeNs now);
  // During an RNR wait: READ responses (lost ones first), no requests.
  uint32_t produce_responses_only(TxOut& out, TimeNs now);
  // The next new packet (a READ response first), window and CC allowing.
  // Flattened: build_data and what it calls are inlined into the path most
  // packets take (42 of about 1120 instructions per packet were calls).
  [[gnu::flatten]] uint32_t produce_new(TxOut& out, TimeNs now);
  // `blame` false: the loss is not its path's fault (PathSet::on_lost).
  void mark_lost(TxRecord& r, LossKind why, TimeNs now, bool blame = true);
  void queue_retransmit(TxRecord& r);
  void unqueue_retx_credit(const TxRecord& r);
  // Appends the CRC trailer when enabled and writes L2-L4 headers; returns
  // the frame length. `body` bytes of UDP payload are already in place.
  uint32_t finish_frame(uint8_t* buf, size_t body, uint16_t entropy, uint8_t tos) const;
  // The TSS seal (auth) or the CRC-32C trailer, out of the common path.
  [[gnu::noinline]] void add_trailer(uint8_t* p, size_t body) const;
  // Bytes a frame carries besides its headers and payload: the TSS header
  // and ICV, or the CRC-32C trailer.
  size_t trailer() const { return trailer_bytes_; }
  // Payloads may go by reference (not copied into the frame).
  bool payload_by_reference() const { return trailer_bytes_ == 0; }
  // connection_rx.cc
  // Not sealed while auth is on, or without the CRC trailer the peer sends:
  // dropped (counted).
  bool admits(const wire::ParsedPacket& pkt);
  [[gnu::always_inline]] inline void on_data(const wire::ParsedPacket& pkt, TimeNs now);
  // Any data packet (on_data takes the common one a shorter way).
  [[gnu::noinline]] void on_data_general(const wire::ParsedPacket& pkt, TimeNs now);
  // A request the queue pair in `slot` (kNoSlot: none) would not take:
  // answered as the reason `why` (not kNone) asks.
  [[gnu::noinline]] void refuse(uint16_t slot, uint32_t psn, Refusal why, TimeNs now);
  // Several queue pairs: whether `q` may place the packet (not in error).
  bool may_place(const QueuePair& q, const wire::ParsedPacket& pkt) {
    if (q.state() == ConnectionState::kActive && !q.refused_from(pkt.req.psn)) [[likely]] {
      return true;
    }
    return may_place_other(pkt);
  }
  // The same for a queue pair in error or past a refusal.
  [[gnu::noinline]] bool may_place_other(const wire::ParsedPacket& pkt);
  // Several queue pairs: the request `psn` of the one in `slot` is refused
  // for good: it ends once every packet before it is in.
  [[gnu::noinline]] void refuse_multi(uint16_t slot, uint32_t psn, Refusal why);
  // The vendor code of the NACK that refuses a request for this reason.
  static uint8_t nack_reason(Refusal why);
  void learn_responder_psn(const wire::ParsedPacket& pkt);
  // READ responses wholly acknowledged leave; a refused request ends the
  // connection once the READs before it are answered.
  void release_read_responses();
  // The request refused (fatal_nack_) is next in order: the connection
  // ends, once the READs accepted before it have been answered.
  void end_after_refusal(TimeNs now);
  void on_in_order_advance() {
    if (!multi()) {
      stop_on(qp_.on_in_order(rx_.cack()));
      return;
    }
    in_order_multi();
  }
  [[gnu::noinline]] void in_order_multi();
  // Several queue pairs: what a data packet placed by the one in `slot`
  // leaves to do (its in-order work, the completions it allows).
  void after_data_multi(const wire::ParsedPacket& pkt, uint16_t slot, uint32_t advanced);
  void queue_nack(uint32_t psn, uint8_t code, uint8_t vendor = 0, uint8_t flags = 0,
                  uint32_t payload = 0);
  // PSNs in the receive window refused for want of a receive and not yet
  // taken (a bit each), and (`nop_only`) PSNs refused for a queue pair not
  // here yet, where only a NO_OP is taken: two bitmaps in one allocation,
  // made at the first such refusal.
  bool refused_for_rnr(uint32_t psn, bool nop_only = false) const {
    const uint32_t i = (psn & (rx_.window() - 1)) + (nop_only ? rx_.window() : 0);
    return (rnr_refused_[i >> 6] >> (i & 63)) & 1;
  }
  void set_refused_for_rnr(uint32_t psn, bool on, bool nop_only = false) {
    if (rnr_refused_.empty()) {
      rnr_refused_.resize(2 * rx_.window() / 64);
      rx_general_ = true;
    }
    const uint32_t i = (psn & (rx_.window() - 1)) + (nop_only ? rx_.window() : 0);
    const uint64_t bit = uint64_t{1} << (i & 63);
    rnr_refused_[i >> 6] = on ? rnr_refused_[i >> 6] | bit : rnr_refused_[i >> 6] & ~bit;
  }
  // A request naming a queue pair this connection does not have: true to
  // take it (a NO_OP); false with *why kInvalid (one removed: refused for
  // good) or kNone (not here yet: refused here, to come again).
  [[gnu::noinline]] bool take_for_no_qp(const wire::ParsedPacket& pkt, Refusal* why);
  // A data packet at a PSN refused earlier (for want of a receive, or for
  // a queue pair not here yet) that must not be taken: answered, counted.
  [[gnu::noinline]] bool refused_here(const wire::ParsedPacket& pkt);
  // How long a sender waits before a request for a queue pair not there
  // yet goes again: its RTO's floor, doubling with each refusal up to the
  // local ACK timeout; it gives up (RETRY_EXC_ERR) after retry_limit + 4
  // refusals, about InfiniBand's budget for a peer that does not answer.
  TimeNs qp_not_ready_wait(uint8_t tries) const {
    return std::min<TimeNs>(cfg_.rto_min_ns << std::min<uint8_t>(tries, 20), cfg_.rto_max_ns);
  }
  // connection_ack.cc
  uint32_t build_ack(uint8_t* buf, uint32_t cap, TimeNs now);
  uint32_t build_hole_ack(uint8_t* buf, uint32_t cap);
  uint32_t build_ack_copy(uint8_t* buf, uint32_t cap);
  // The PSN an ACK naming *trigger can name (cack if it is out of the
  // offset's reach), and the base of the 64-PSN SACK block it reports.
  void ack_block(uint32_t* trigger, uint32_t* base) const;
  // An ACK_CC naming `trigger`, with the SACK bitmap of [base, base + 63].
  // `held`: how long the triggering packet waited for this ACK here.
  uint32_t write_ack(uint8_t* buf, uint32_t trigger, uint32_t base, uint8_t flags, TimeNs held);
  // Hole ACKs that may follow one ACK (each reports one more 64-PSN block).
  static constexpr uint8_t kHoleAcksPerAck = 1;
  uint32_t build_nack(uint8_t* buf, uint32_t cap);
  uint32_t build_cnp(uint8_t* buf, uint32_t cap);
  void schedule_ack(bool immediate, TimeNs now);
  [[gnu::always_inline]] inline void on_ack(const wire::ParsedPacket& pkt, TimeNs now);
  void on_spurious_timeout();
  void on_nack(const wire::ParsedPacket& pkt, TimeNs now);
  // The peer refused the request packet `r` for want of a receive (RNR).
  void rnr_refill(TxRecord& r);
  // ... because the queue pair it names is not there yet (a shared PDC).
  void qp_not_ready(TxRecord& r, TimeNs now);
  // The record becomes a NO_OP that fills its PSN; `resend`: its part goes
  // again under a new PSN.
  void nop_fill(TxRecord& r, bool resend, bool any_opcode = false);
  uint32_t build_cack_ctrl(uint8_t* buf, uint32_t cap, wire::CtrlType type);
  // The peer's CLOSE: what it received in order is acknowledged (cack).
  void on_close(uint32_t cack, TimeNs now);

 public:
  // The peer's control packets name a PSN of ours it received (CLOSE, CNP,
  // CREDIT: its cumulative PSN) or of its own it sent (CREDIT_REQ). One
  // outside what the peer could have named came from an earlier connection
  // on the same ids or from a stranger guessing. A CLOSE's is exact
  // (between what the peer acknowledged and what we sent); the others allow
  // kCtrlSlack packets of reordering behind.
  static constexpr uint32_t kCtrlSlack = 1024;
  bool names_sent_psn(uint32_t cack, uint32_t slack) const {
    return psn_lt(cack, snd_nxt_) && !psn_lt(cack + 1 + slack, snd_una_);
  }
  bool names_received_psn(uint32_t psn) const;
  void note_stale_close() { ++stats_.stale_closes; }
  // Authenticated mode: checks a sealed packet's counter and ICV and
  // decrypts it into `scratch` (room for its length), then decodes the SES
  // header and payload from there into `pkt`. False (counted) if it is not
  // this direction's, replayed, or forged.
  bool open_sealed(wire::ParsedPacket* pkt, uint8_t* scratch, size_t scratch_size);
  // A closing connection's keys and replay window go to the endpoint's
  // record, which seals its CLOSE (again at each send) and opens what
  // the peer answers. After this the connection sends nothing sealed.
  void give_keys(std::unique_ptr<wire::TssKey>* tx, std::unique_ptr<wire::TssKey>* rx,
                 wire::TssReplayWindow* replay) {
    *tx = std::move(tx_key_);
    *rx = std::move(rx_key_);
    *replay = replay_;
  }
  // Keys could not be made (libcrypto failed): the connection must not run.
  bool auth_broken() const { return cfg_.auth && (tx_key_ == nullptr || rx_key_ == nullptr); }
  void note_unsealed() { ++stats_.unsealed; }

 private:
  void derive_keys(bool keep_tx);
  // The SES job id and the TSS key of a direction, ours (local to remote)
  // or the peer's, from the PSN it started at.
  uint32_t job_id_for(bool ours, uint32_t start_psn) const;
  std::unique_ptr<wire::TssKey> key_for(bool ours, uint32_t start_psn) const;

  // `marked`: the ACK says it arrived with ECN-CE (it named it).
  // `held`: how long the receiver says it held the ACK (its service time):
  // the path's delay is the time since the last transmission less that.
  // Inlined into on_ack, its per-packet caller (a call there cost 14
  // instructions a packet, bench/core_instructions.sh).
  // What was in flight of it is added to *flight_bytes: the caller takes it
  // out of the window once for all the records it acknowledges.
  [[gnu::always_inline]] inline void ack_record(TxRecord& r, uint32_t* acked_bytes,
                                                uint32_t* flight_bytes, bool marked, TimeNs now,
                                                TimeNs held = 0);
  // Judges the PSNs an ACK reported missing: the first hole (cack + 1) and
  // the clear bits of its SACK window [base, base + 63].
  void detect_losses(uint32_t base, TimeNs now);
  void judge_loss(TxRecord& r, uint32_t thresh, TimeNs now);

  // The transmit records start with this many and double when full, up to
  // the window (ring.h).
  static constexpr uint32_t kInitialTxRecords = 64;
  void grow_tx();
  TxRecord& rec(uint32_t psn) { return tx_[psn & tx_mask_]; }
  const TxRecord& rec(uint32_t psn) const { return tx_[psn & tx_mask_]; }

  ConnectionConfig cfg_;
  TimingWheel* wheel_;
  wire::FrameTemplate frame_;
  wire::DecodeOptions decode_opts_;
  ConnectionState state_ = ConnectionState::kActive;
  bool mac_known_ = true;
  ConnectionStats stats_;
  AckAsked* ack_asked_ = nullptr;
  // The queue pair this connection carries, and every queue pair by its
  // slot (a transmit record's `qp`; a READ response names the slot of the
  // READ's requester): for now only this one, slot 0.
  QueuePair qp_;
  std::vector<QueuePair*> qps_;
  QueuePair& qp_of(const TxRecord& r) { return *qps_[r.qp]; }
  // With several: the others (owned), their slots by QP number, and the
  // slots with something to segment (turns) and with work waiting for
  // PSNs in order (completions on ACKs: after_progress_multi).
  std::vector<std::unique_ptr<QueuePair>> more_qps_;
  std::unordered_map<uint32_t, uint16_t> slot_of_qpn_;
  // The last request's queue pair (several queue pairs): its 24-bit QP
  // number (kNoQpn: none) and slot.
  static constexpr uint32_t kNoQpn = ~0u;
  uint32_t last_rx_qpn_ = kNoQpn;
  uint16_t last_rx_slot_ = 0;
  // QP numbers of queue pairs removed (a request for one is refused; for
  // one not here yet, the sender waits as for RNR).
  std::unordered_set<uint32_t> removed_qpns_;
  ReadyQueue sending_, receiving_;
  // after_progress_multi's scratch: each queue pair once (a stamp per slot).
  std::vector<uint32_t> visit_stamp_;
  std::vector<uint16_t> visit_;
  uint32_t visit_epoch_ = 0;
  bool multi_ = false;  // more than one queue pair
  // Every data packet takes on_data's general way: several queue pairs, a
  // refusal pending, or PSNs refused for RNR (each set once, for good).
  bool rx_general_ = false;
  // The queue pairs' turns at new packets (next_new_multi): kQpTurn packets
  // each, as the endpoint's turns among connections (fewer list operations,
  // and runs of one queue pair's packets for its receiver).
  static constexpr uint16_t kQpTurn = 16;
  uint16_t turn_used_ = 0;
  uint32_t reads_total_ = 0;  // READs outstanding, every queue pair's (QueuePair::set_reads_sum)
  uint32_t removed_ = 0;      // queue pairs removed
  // A sink for what removed queue pairs would complete (never polled).
  std::unique_ptr<CompletionQueue> removed_cq_;
  // Slots of removed queue pairs: each is freed (its queue pair's memory
  // with it) once no packet of it is unacknowledged (`until`: snd_nxt_ when
  // it left), and a new queue pair takes it. One that had READs
  // outstanding keeps its slot (their responses name it), as does slot 0.
  struct Retiring {
    uint16_t slot;
    uint32_t until;
  };
  std::vector<Retiring> retiring_;
  std::vector<uint16_t> free_slots_;
  // What a freed slot holds until a new queue pair takes it: a queue pair
  // removed, with nothing in it (whatever still names the slot finds it
  // removed, as it found the one that left).
  std::unique_ptr<QueuePair> tombstone_;
  void reclaim_slots();
  // The ids named on the wire: ours (spdcid, dpdcid) and the peer's (what
  // it puts there). A shared PDC's change as it learns (shared above).
  uint16_t name_src_ = 0, name_dst_ = 0, peer_src_ = 0, peer_dst_ = 0;
  bool peer_named_ = true;  // the peer's are known (a shared PDC learns them)
  uint32_t named_src_ = 0;  // named_src()
  bool spoken_ = false;     // ... fixed ours (speak_as)

  // Transmit state.
  std::vector<TxRecord> tx_;
  uint32_t tx_mask_;
  uint32_t snd_una_;  // oldest PSN not cumulatively acknowledged
  uint32_t snd_nxt_;  // next new PSN
  uint32_t highest_sacked_;
  TimeNs latest_acked_sent_ = 0;  // the latest send time of a packet sent once and acknowledged
  uint32_t inflight_bytes_ = 0;
  std::vector<uint32_t> retx_queue_;  // PSNs declared lost, in order of loss
  uint32_t retx_mask_;
  uint32_t retx_head_ = 0;
  uint32_t retx_count_ = 0;
  PathSet paths_;
  // The congestion state: shared with the connections to the same peer
  // (the endpoint's), or this one's own.
  std::unique_ptr<PeerCongestion> own_peer_;
  PeerCongestion* peer_;
  bool waiting_for_peer_ = false;  // on peer_'s list of waiters
  bool wants_peer_turns_ = false;  // on peer_'s list of credit demand
  RttEstimator rtt_;               // over every entropy
  uint32_t read_retries_ = 0;      // read timeouts since response data last arrived
  TimeNs read_progress_at_ = 0;  // a READ sent or response data received, or the last read timeout
  TimeNs read_heard_at_ = 0;     // a READ sent or response data received
  TimeNs progress_at_ = 0;       // snd_una_ advanced, or a packet sent with none outstanding
  // The refusal that put the responder in error: a retransmission of the
  // refused packet gets the NACK again (the first may have been lost).
  PendingNack fatal_nack_{};
  bool has_fatal_nack_ = false;
  bool error_after_reads_ = false;  // ... and ends once the READs before it are answered
  bool peer_crc_ = false;           // the peer's packets carry CRC-32C trailers
  Timer rto_timer_;
  Timer hold_timer_;
  Timer probe_timer_;
  ReadyQueue* control_q_ = nullptr;
  ReadyQueue* data_q_ = nullptr;
  // Receiver-driven credit, the sender's half.
  bool credit_on_ = false;
  CreditSender credit_;
  uint64_t unsent_credit_ = 0;  // frame bytes of requests posted and not yet segmented
  uint64_t retx_credit_ = 0;    // ... of requests queued for retransmission
  bool credit_req_due_ = false;
  bool credit_req_forced_ = false;  // ask again though nothing changed (credit is late)
  TimeNs credit_wait_ = 0;          // how long to wait for credit before asking again
  TimeNs last_grant_at_ = 0;        // when the last new grant arrived
  TimeNs grant_gap_ = 0;            // smoothed time between grants
  // Waiting for credit spends the retry budget as a timeout does: asks
  // unanswered since the peer last granted or acknowledged anything.
  uint8_t credit_retries_ = 0;
  TimeNs credit_heard_at_ = 0;
  Timer credit_timer_;
  // ... the receiver's half.
  CreditGrantor grantor_;

  // Receive state.
  ReceiveWindow rx_;
  // The SES job id of each direction (direction_job_id): what we send, and
  // what the peer's data must carry.
  uint32_t tx_job_id_ = 0;
  uint32_t rx_job_id_ = 0;
  // Authenticated mode: a key per direction; until the first data arrives,
  // also the key a responder that answered in RTR seals with (it starts at
  // our initial PSN: learn_responder_psn).
  std::unique_ptr<wire::TssKey> tx_key_, rx_key_, rx_key_rtr_;
  uint8_t trailer_bytes_ = 0;  // trailer(): kTssOverhead, kCrcTrailerSize or 0
  wire::TssReplayWindow replay_;
  PendingNack nacks_[32];
  std::vector<uint64_t> rnr_refused_;
  uint32_t nack_count_ = 0;
  bool ack_due_ = false;
  bool close_answer_due_ = false;  // a CLOSE arrived: answer it
  bool peer_closed_ = false;       // ... and the peer needs nothing more from us
  bool cnp_due_ = false;           // DCQCN: a CNP is to go out
  uint32_t unacked_packets_ = 0;
  uint32_t ack_trigger_psn_ = 0;
  TimeNs ack_trigger_at_ = 0;  // when that packet arrived
  bool ack_trigger_ecn_ = false;
  bool ack_trigger_retx_ = false;
  // ACKs built when a CE-marked packet arrived while the ACK due named an
  // earlier CE-marked one: every marked packet is named by an ACK of its
  // own, so its sender knows which entropies are marked (coalesced ACKs
  // would say it of one packet only). Sent before the next ACK.
  // Allocated the first time a connection needs it (most never do).
  static constexpr uint32_t kCeAcks = 64;
  static constexpr uint32_t kCeAckBytes =
      wire::kL2L4Size + wire::kAckCcSize + wire::kTssOverhead;  // the longest trailer
  struct CeAcks {
    uint8_t frame[kCeAcks][kCeAckBytes];
    uint8_t len[kCeAcks];
  };
  std::unique_ptr<CeAcks> ce_acks_;
  uint8_t ce_ack_head_ = 0;
  uint8_t ce_ack_count_ = 0;
  // An ACK for a retransmitted packet goes out kRetxAckCopies more times,
  // each on the next entropy: its sender has already lost an ACK or the
  // packet, and a path that swallows ACKs must not swallow every answer.
  static constexpr uint8_t kRetxAckCopies = 2;
  uint8_t retx_ack_copies_ = 0;
  uint32_t retx_ack_trigger_ = 0;
  uint32_t rcvd_bytes_ = 0;
  uint32_t sack_top_ = 0;     // base of the last ACK's block: holes below it are reported apart
  uint32_t sack_cursor_ = 0;  // the next hole block to report
  uint8_t hole_acks_due_ = 0;
  uint32_t freshest_rcvd_bytes_ = 0;  // newest receiver byte count seen in an ACK (24 bits)
  bool seen_ack_ = false;
  Timer ack_timer_;
};

}  // namespace braid

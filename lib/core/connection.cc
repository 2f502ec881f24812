// Connection: construction, posting work requests, completions in RC order,
// the error state and the retransmission timer.
#include "core/connection.h"
#include "wire/byte_order.h"

#include <algorithm>
#include <bit>
#include <bitset>

namespace braid {

namespace {

uint32_t pow2_at_least(uint32_t v, uint32_t min) {
  v = std::max(v, min);
  return std::bit_ceil(v);
}

// PSN window: a power of two from 128 (two bitmap words) to 16384 (ACK
// offsets are signed 16-bit).
uint32_t window_of(const ConnectionConfig& c) {
  return std::min<uint32_t>(pow2_at_least(c.window_packets, 128), 16384);
}

// The settings as the connection keeps them: clamped to what the wire and
// the rings can carry.
ConnectionConfig normalized(ConnectionConfig c) {
  c.window_packets = window_of(c);
  // Messages are named by 16-bit ids on the wire and receives by 31-bit
  // numbers: the queues must stay well inside both.
  c.sq_depth = std::min<uint32_t>(pow2_at_least(c.sq_depth, 1), 32768);
  c.rq_depth = std::min<uint32_t>(pow2_at_least(c.rq_depth, 1), 1u << 20);
  c.max_rd_atomic = std::max<uint32_t>(c.max_rd_atomic, 1);
  c.max_dest_rd_atomic = std::min<uint32_t>(c.max_dest_rd_atomic, 256);
  c.mtu = std::clamp<uint32_t>(c.mtu, 64, 16384 - 1);  // SES payload_length is 14 bits
  c.ack_every = std::max<uint32_t>(c.ack_every, 1);
  return c;
}

QpConfig qp_config(const ConnectionConfig& c) {
  QpConfig q;
  q.qp_num = c.qp_num;
  q.remote_qpn = c.remote_qpn & 0xffffff;
  q.pd = c.pd;
  q.mtu = c.mtu;
  q.sq_depth = c.sq_depth;
  q.rq_depth = c.rq_depth;
  q.srq = c.srq;
  q.on_error = c.on_error;
  q.on_error_arg = c.on_error_arg;
  q.max_rd_atomic = c.max_rd_atomic;
  q.max_dest_rd_atomic = c.max_dest_rd_atomic;
  q.remote_access = c.remote_access;
  q.max_tails = c.window_packets;
  q.grow_rings = c.grow_rings;
  q.rx_psn = c.rx_psn;
  return q;
}

}  // namespace

uint32_t direction_job_id(uint32_t start_psn, uint16_t src_id, uint16_t dst_id, uint32_t src_ip,
                          uint32_t dst_ip) {
  // Two rounds of a 64-bit multiply-xorshift mix: every input bit reaches
  // every output bit.
  const auto mix = [](uint64_t x) {
    x ^= x >> 31;
    x *= 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 32);
  };
  const uint64_t a = (uint64_t{start_psn} << 32) | (uint64_t{src_id} << 16) | dst_id;
  const uint64_t b = (uint64_t{src_ip} << 32) | dst_ip;
  return static_cast<uint32_t>(mix(mix(a) ^ b)) & 0xffffff;
}

Connection::Connection(const ConnectionConfig& cfg, MemoryRegionTable* mrs,
                       CompletionQueue* send_cq, CompletionQueue* recv_cq, TimingWheel* wheel,
                       PeerCongestion* peer)
    : cfg_(normalized(cfg)),
      wheel_(wheel),
      frame_(cfg.local_mac, cfg.remote_mac, cfg.local_ip, cfg.remote_ip, cfg.udp_port),
      qp_(qp_config(cfg_), &stats_, mrs, send_cq, recv_cq),
      paths_(cfg.entropy),
      own_peer_(
          peer != nullptr
              ? nullptr
              : std::make_unique<PeerCongestion>(
                    cfg.cc, std::clamp<uint32_t>(cfg.mtu, 64, 16384 - 1) + kPacketCharge, wheel)),
      peer_(peer != nullptr ? peer : own_peer_.get()),
      rtt_(cfg.rto_initial_ns, cfg.rto_min_ns, cfg.rto_max_ns),
      rx_(window_of(cfg), cfg.rx_psn) {
  mac_known_ = !cfg.await_remote_mac;
  decode_opts_.udp_port = cfg.udp_port;
  decode_opts_.crc_trailer = false;
  decode_opts_.trim_dscp = cfg.trim_dscp;

  const uint32_t records =
      cfg_.grow_rings ? std::min(cfg_.window_packets, kInitialTxRecords) : cfg_.window_packets;
  tx_.resize(records);
  tx_mask_ = records - 1;
  // Twice the records: entries of packets acknowledged while queued linger
  // until popped, next to at most one live entry per PSN in flight.
  retx_queue_.resize(2 * records);
  retx_mask_ = 2 * records - 1;
  snd_una_ = snd_nxt_ = cfg.tx_psn;
  highest_sacked_ = cfg.tx_psn - 1;
  name_src_ = peer_dst_ = cfg_.local_id;
  name_dst_ = peer_src_ = cfg_.remote_id;
  peer_named_ = !cfg_.shared;  // (only a shared PDC learns them)
  named_src_ = peer_named_ ? cfg_.remote_id : 0x10000u;
  if (cfg_.shared) cfg_.auth = false;  // (not supported: a key per pair of QPs)
  tx_job_id_ = job_id_for(true, cfg_.tx_psn);
  rx_job_id_ = job_id_for(false, cfg_.rx_psn);
  trailer_bytes_ = cfg_.auth ? wire::kTssOverhead : cfg_.crc_trailer ? wire::kCrcTrailerSize : 0;
  if (cfg_.auth) {
    cfg_.crc_trailer = false;  // the ICV covers more
    rx_key_ = key_for(false, cfg_.rx_psn);
    derive_keys(false);
  }
  qps_.push_back(&qp_);
  qp_.set_reads_sum(&reads_total_);
  peer_->join(this);
  rto_timer_.fn = &Connection::rto_thunk;
  rto_timer_.owner = this;
  ack_timer_.fn = &Connection::ack_thunk;
  ack_timer_.owner = this;
  hold_timer_.fn = &Connection::hold_thunk;
  hold_timer_.owner = this;
  probe_timer_.fn = &Connection::probe_thunk;
  probe_timer_.owner = this;
  credit_timer_.fn = &Connection::credit_thunk;
  credit_timer_.owner = this;
  credit_on_ = cfg.cc.credit;
  if (credit_on_) {
    uint64_t spec = cfg.cc.credit_speculative_bytes;
    if (spec == 0) {
      spec = cfg.cc.base_rtt_ns > 0 ? cfg.cc.bdp_bytes() : 64 * 1024;
    }
    credit_ = CreditSender(static_cast<uint32_t>(std::clamp<uint64_t>(spec, 1, 1u << 30)));
  }
}

void Connection::grow_tx() {
  const size_t size = 2 * tx_.size();
  grow_ring(tx_, &tx_mask_, snd_una_, snd_nxt_, size);
  // The retransmit queue in order from its head (PSNs are its entries, not
  // its slots).
  std::vector<uint32_t> queue(2 * size);
  for (uint32_t i = 0; i < retx_count_; ++i) queue[i] = retx_queue_[(retx_head_ + i) & retx_mask_];
  retx_queue_.swap(queue);
  retx_mask_ = static_cast<uint32_t>(2 * size - 1);
  retx_head_ = 0;
}

Connection::~Connection() {
  wheel_->cancel(&rto_timer_);
  wheel_->cancel(&ack_timer_);
  wheel_->cancel(&hold_timer_);
  wheel_->cancel(&probe_timer_);
  wheel_->cancel(&credit_timer_);
  // The owner wakes the others (Endpoint::destroy_connection): their
  // queues may be going too.
  peer_->sub_inflight(inflight_bytes_);
  peer_->leave(this);
}

size_t Connection::memory_footprint() const {
  size_t qps = 0;
  for (const QueuePair* q : qps_) {
    if (q != tombstone_.get()) qps += q->memory_footprint();
  }
  for (size_t i = 1; i < qps_.size(); ++i) {
    qps += (qps_[i] != tombstone_.get() ? sizeof(QueuePair) : 0) + sizeof(void*);
  }
  if (tombstone_ != nullptr) qps += sizeof(QueuePair) + tombstone_->memory_footprint();
  // The table by QP number (a node and a bucket each, about) and the lists.
  qps += slot_of_qpn_.size() * (sizeof(void*) + 4 * sizeof(uint32_t)) +
         slot_of_qpn_.bucket_count() * sizeof(void*) + 3 * sending_.ids() * 3;
  return sizeof(*this) + tx_.capacity() * sizeof(TxRecord) +
         retx_queue_.capacity() * sizeof(uint32_t) + qps + paths_.memory_footprint() +
         rx_.window() / 8;
}

void Connection::set_remote_mac(const wire::MacAddr& mac) {
  cfg_.remote_mac = mac;
  frame_.set_dst_mac(mac);
  mac_known_ = true;
  poke();
}

bool Connection::set_send_psn(uint32_t psn) {
  if (qp_.posted_any()) return false;
  // A responder answered READs before RTS (InfiniBand allows it in RTR):
  // its PSN space has started and the requester follows it (learned from
  // the first response), so it continues where it is.
  if (qp_.answered_reads()) return true;
  if (snd_nxt_ != cfg_.tx_psn) return false;
  start_sending_at(psn);
  if (cfg_.auth) {
    // Keys for the new PSN, unless something (an ACK in RTR) went sealed
    // with the old one: the peer may have taken that key for good
    // (open_sealed), so it stays.
    derive_keys(tx_key_ != nullptr && tx_key_->used());
    if (auth_broken()) return false;
  }
  return true;
}

void Connection::derive_keys(bool keep_tx) {
  // Ours, from the PSN we start at; and the one a peer that sent in RTR
  // seals with (it starts at our PSN too: responses and ACKs).
  if (!keep_tx) tx_key_ = key_for(true, cfg_.tx_psn);
  rx_key_rtr_ = cfg_.tx_psn == cfg_.rx_psn ? nullptr : key_for(false, cfg_.tx_psn);
}

uint32_t Connection::job_id_for(bool ours, uint32_t start_psn) const {
  return ours ? direction_job_id(start_psn, name_src_, name_dst_, cfg_.local_ip, cfg_.remote_ip)
              : direction_job_id(start_psn, peer_src_, peer_dst_, cfg_.remote_ip, cfg_.local_ip);
}

void Connection::speak_as(uint16_t slot, uint32_t psn) {
  if (!cfg_.shared || spoken_ || slot >= qps_.size()) return;
  // Something went already (READ responses in RTR, under the names and
  // PSNs the peer's first data gave): the peer follows those.
  if (snd_nxt_ != cfg_.tx_psn || answered_reads()) {
    spoken_ = true;
    return;
  }
  const QpConfig& q = qps_[slot]->config();
  set_names(static_cast<uint16_t>(q.qp_num), static_cast<uint16_t>(q.remote_qpn));
  spoken_ = true;
  start_sending_at(psn);
}

void Connection::start_sending_at(uint32_t psn) {
  cfg_.tx_psn = psn;
  snd_una_ = snd_nxt_ = psn;
  highest_sacked_ = psn - 1;
  tx_job_id_ = job_id_for(true, psn);  // (after the names: the job id covers them)
}

bool Connection::learn_peer_names(const wire::ParsedPacket& pkt, uint16_t dst, uint16_t src) {
  // The queue pair the peer names, and where its peer's PSNs start.
  const QueuePair* named = nullptr;
  for (const QueuePair* q : qps_) {
    if (q->config().qp_num == dst && q->config().remote_qpn == src) named = q;
  }
  if (named == nullptr) return false;
  uint32_t start = named->config().rx_psn;
  uint32_t job = direction_job_id(start, src, dst, cfg_.remote_ip, cfg_.local_ip);
  const uint32_t got = pkt.has_ses_request    ? pkt.ses.job_id
                       : pkt.has_ses_response ? pkt.resp.job_id
                                              : ~0u;
  uint16_t first = 0;
  if (got != job && pkt.has_ses_response && dst == name_src_ && src == name_dst_ &&
      pkt.req.psn == cfg_.tx_psn && pkt.resp.message_offset == 0 &&
      pkt.resp.message_id < qps_.size() && qps_[pkt.resp.message_id]->first_read(&first) &&
      first == pkt.resp.read_request_message_id) {
    // A responder that answers in RTR (it has no send PSN) starts its
    // responses at ours, under our names reversed, as with one QP
    // (learn_responder_psn): the first packet of the response to the first
    // READ of the queue pair it names.
    start = cfg_.tx_psn;
    job = direction_job_id(start, src, dst, cfg_.remote_ip, cfg_.local_ip);
  }
  if (pkt.trimmed || got != job) {
    ++stats_.wrong_job_id;
    return false;
  }
  peer_src_ = src;
  peer_dst_ = dst;
  peer_named_ = true;
  named_src_ = cfg_.remote_id;
  cfg_.rx_psn = start;
  rx_.restart(start);
  rx_job_id_ = job;
  if (!spoken_ && snd_nxt_ == cfg_.tx_psn && !answered_reads()) {
    // Until a queue pair of ours reaches RTS, what we send (READ responses
    // in RTR) goes under the peer's names reversed, from its first PSN on,
    // as a single QP's RTR responder does (learn_responder_psn).
    set_names(dst, src);
    start_sending_at(start);
  }
  return true;
}

bool Connection::remove_queue_pair(uint16_t slot) {
  if (!multi_ || slot >= qps_.size() || qps_[slot]->removed() || live_queue_pairs() <= 1) {
    return false;
  }
  QueuePair& q = *qps_[slot];
  if (removed_cq_ == nullptr) removed_cq_ = std::make_unique<CompletionQueue>(1);
  const bool active = q.state() == ConnectionState::kActive;
  if (slot != 0 && !q.abandoned_reads()) retiring_.push_back({slot, snd_nxt_});
  q.remove(removed_cq_.get(), snd_una_);  // no completion reaches its CQs
  if (active) nop_fill_requests(slot);    // (an error did it already)
  ++removed_;
  slot_of_qpn_.erase(q.config().qp_num & 0xffffff);
  last_rx_qpn_ = kNoQpn;
  removed_qpns_.insert(q.config().qp_num & 0xffffff);
  sending_.remove(slot);
  receiving_.remove(slot);
  poke();
  return true;
}

std::unique_ptr<wire::TssKey> Connection::key_for(bool ours, uint32_t start_psn) const {
  const wire::TssDirection d =
      ours ? wire::TssDirection{cfg_.local_ip,  cfg_.remote_ip, cfg_.local_id,
                                cfg_.remote_id, start_psn,      cfg_.auth_nonce}
           : wire::TssDirection{cfg_.remote_ip, cfg_.local_ip, cfg_.remote_id,
                                cfg_.local_id,  start_psn,     cfg_.auth_nonce};
  return wire::TssKey::derive(cfg_.auth_secret, d, cfg_.auth_sdi);
}

void Connection::set_retry(uint8_t retry_limit, uint8_t rnr_retry_limit, TimeNs rto_max_ns,
                           bool retry_forever) {
  cfg_.retry_limit = retry_limit;
  cfg_.rnr_retry_limit = rnr_retry_limit;
  cfg_.rto_max_ns = std::max(rto_max_ns, cfg_.rto_min_ns);
  cfg_.retry_forever = retry_forever;
  rtt_.set_max(cfg_.rto_max_ns);
}

PostError Connection::post_send(uint16_t slot, const SendRequest& wr) {
  if (state_ != ConnectionState::kActive) return PostError::kConnectionError;
  if (slot >= qps_.size()) return PostError::kInvalid;
  // From idle, a burst may start on the speculative allowance.
  const bool idle = credit_on_ && snd_una_ == snd_nxt_ && at_tail() && retx_count_ == 0;
  uint64_t length = 0;
  const PostError e = qps_[slot]->post_send(wr, &length);
  if (e != PostError::kOk) return e;
  if (credit_on_) {
    if (idle) {
      unsent_credit_ = retx_credit_ = 0;
      credit_.on_idle();
    }
    const uint64_t payload = answered_with_data(wr.opcode) ? 0 : length;
    const uint64_t packets = std::max<uint64_t>(1, (payload + cfg_.mtu - 1) / cfg_.mtu);
    unsent_credit_ += payload + packets * credit_header();
  }
  if (multi()) sending_.push(slot);
  // A post makes data to send and no control frame (unless credit asks for
  // one): the data queue needs a look, and the peer's waiters go first if
  // the window has room for them (they were woken in their order).
  if (credit_on_) {
    poke();
  } else {
    peer_->wake_if_open();
    queue_data();
  }
  return PostError::kOk;
}

PostError Connection::post_recv(uint16_t slot, uint64_t wr_id, const SgList& sgl) {
  if (state_ != ConnectionState::kActive) return PostError::kConnectionError;
  if (slot >= qps_.size()) return PostError::kInvalid;
  return qps_[slot]->post_recv(wr_id, sgl);
}

void Connection::reclaim_slots() {
  std::erase_if(retiring_, [&](const Retiring& r) {
    // A packet of it may still go again, unless nothing is unacknowledged
    // (where PSNs start may have moved since it left: start_sending_at).
    if (psn_lt(snd_una_, r.until) && snd_una_ != snd_nxt_) return false;
    if (tombstone_ == nullptr) {
      QpConfig t;
      t.slot = kNoSlot;
      t.sq_depth = t.rq_depth = t.max_rd_atomic = t.max_dest_rd_atomic = 1;
      tombstone_ = std::make_unique<QueuePair>(t, &stats_, qp_.memory(), removed_cq_.get(),
                                               removed_cq_.get());
      tombstone_->remove(removed_cq_.get(), snd_una_);
    }
    qps_[r.slot] = tombstone_.get();
    more_qps_[r.slot - 1].reset();
    free_slots_.push_back(r.slot);
    return true;
  });
}

uint16_t Connection::add_queue_pair(QpConfig q, CompletionQueue* send_cq,
                                    CompletionQueue* recv_cq) {
  if (q.qp_num == qp_.config().qp_num || slot_of_qpn_.contains(q.qp_num)) return kNoSlot;
  if (!retiring_.empty()) reclaim_slots();
  q.remote_qpn &= 0xffffff;
  if (!free_slots_.empty()) {  // a removed queue pair's, freed
    const uint16_t slot = free_slots_.back();
    free_slots_.pop_back();
    q.slot = slot;
    more_qps_[slot - 1] = std::make_unique<QueuePair>(q, &stats_, qp_.memory(), send_cq, recv_cq);
    more_qps_[slot - 1]->set_reads_sum(&reads_total_);
    qps_[slot] = more_qps_[slot - 1].get();
    --removed_;
    slot_of_qpn_.emplace(q.qp_num & 0xffffff, slot);
    removed_qpns_.erase(q.qp_num & 0xffffff);
    return slot;
  }
  if (qps_.size() >= kNoSlot) return kNoSlot;
  const auto slot = static_cast<uint16_t>(qps_.size());
  q.slot = slot;
  more_qps_.push_back(std::make_unique<QueuePair>(q, &stats_, qp_.memory(), send_cq, recv_cq));
  more_qps_.back()->set_reads_sum(&reads_total_);
  qps_.push_back(more_qps_.back().get());
  go_multi();
  slot_of_qpn_.emplace(q.qp_num & 0xffffff, slot);
  removed_qpns_.erase(q.qp_num & 0xffffff);
  for (ReadyQueue* l : {&sending_, &receiving_}) l->reserve_ids(qps_.size());
  visit_stamp_.resize(qps_.size(), 0);
  return slot;
}

void Connection::set_draining(uint16_t slot, bool on) {
  QueuePair& q = *qps_[slot];
  q.set_draining(on);
  if (on || q.all_segmented()) return;
  // Back to RTS: what waited is data to send again.
  if (multi()) sending_.push(slot);
  poke();
}

void Connection::go_multi() {
  if (multi_) return;
  multi_ = true;
  rx_general_ = true;
  slot_of_qpn_.emplace(qp_.config().qp_num & 0xffffff, 0);
  // The lists start now: the first queue pair's work joins them.
  for (ReadyQueue* l : {&sending_, &receiving_}) l->reserve_ids(qps_.size());
  visit_stamp_.resize(qps_.size(), 0);
  if (!qp_.all_segmented()) sending_.push(0);
  if (qp_.in_order_pending()) receiving_.push(0);
}

bool Connection::answered_reads() const {
  for (const QueuePair* q : qps_) {
    if (q->answered_reads()) return true;
  }
  return false;
}

bool Connection::reads_outstanding() const {
  return reads_total_ > 0;
}

void Connection::stop_qp_multi(uint16_t slot, WcStatus e) {
  QueuePair& q = *qps_[slot];
  if (q.state() != ConnectionState::kActive) return;
  q.flush(e, snd_una_);
  nop_fill_requests(slot);
}

void Connection::nop_fill_requests(uint16_t slot) {
  for (uint32_t psn = snd_una_; psn != snd_nxt_; ++psn) {
    TxRecord& r = rec(psn);
    if (r.qp == slot && r.kind == TxKind::kRequest && r.state != TxState::kAcked) {
      nop_fill(r, false);
    }
  }
}

void Connection::after_progress_multi(uint32_t from, TimeNs now) {
  // The queue pairs that had a packet among the PSNs now acknowledged in
  // order (their records are still there): a request completes once its
  // last packet is, a READ response frees its room once its last is. So
  // an ACK costs what it acknowledges, not the number of busy queue pairs.
  if (++visit_epoch_ == 0) {
    std::fill(visit_stamp_.begin(), visit_stamp_.end(), 0);
    visit_epoch_ = 1;
  }
  visit_.clear();
  uint16_t last = kNoSlot;
  for (uint32_t psn = from; psn != snd_una_; ++psn) {
    const uint16_t slot = rec(psn).qp;
    if (slot == last) continue;  // a turn's packets follow each other
    last = slot;
    if (visit_stamp_[slot] == visit_epoch_) continue;
    visit_stamp_[slot] = visit_epoch_;
    visit_.push_back(slot);
  }
  for (const uint16_t slot : visit_) {
    QueuePair& q = *qps_[slot];
    if (q.reads_outstanding() > 0) q.note_read_heard(now);  // its READ may be the one taken
    const bool had_responses = q.responses_pending();
    q.release_read_responses(snd_una_, rx_.cack());  // READs waiting for room may start
    if (!had_responses && q.responses_pending()) sending_.push(slot);
    stop_qp(slot, q.complete_sends(snd_una_));
  }
  if (!retiring_.empty()) reclaim_slots();
  // A busy PDC's timer never fires (each ACK sets it again): a READ whose
  // responder went is found here.
  if (reads_total_ > 0 && now >= stale_reads_at_) [[unlikely]] {
    end_stale_reads(now);
  }
}

void Connection::in_order_multi() {
  const uint32_t cack = rx_.cack();
  for (size_t n = receiving_.size(); n > 0; --n) {
    const uint16_t slot = receiving_.front();
    receiving_.pop();
    QueuePair& q = *qps_[slot];
    const bool had_responses = q.responses_pending();
    stop_qp(slot, q.on_in_order(cack));
    if (q.state() != ConnectionState::kActive) continue;
    if (q.refusal_due(cack)) {
      stop_qp(slot, WcStatus::kWrFlushErr);  // everything before its refusal is in
      continue;
    }
    if (!had_responses && q.responses_pending()) sending_.push(slot);  // READs answered
    if (q.in_order_pending()) receiving_.push(slot);
  }
}

void Connection::set_error(WcStatus status) {
  if (state_ == ConnectionState::kError) return;
  state_ = ConnectionState::kError;
  wheel_->cancel(&rto_timer_);
  wheel_->cancel(&ack_timer_);
  wheel_->cancel(&hold_timer_);
  wheel_->cancel(&probe_timer_);
  for (QueuePair* q : qps_) q->flush(status, snd_una_);
  sub_inflight(inflight_bytes_);
  peer_->forget(this);  // it sends no data again: it must not take a waiter's turn
  retx_count_ = 0;
  // Queued NACKs still go out (they tell the peer why), and so does the ACK
  // owed for what was accepted before the error: those requests are done
  // here and must complete at the peer as done.
  ack_due_ = unacked_packets_ > 0;
  poke();
}

bool Connection::revoke_local_key(uint32_t lkey) {
  bool used = false;
  for (uint16_t slot = 0; slot < qps_.size(); ++slot) {
    if (!qps_[slot]->revoke_local_key(lkey)) continue;
    used = true;
    stop_qp(slot, WcStatus::kWrFlushErr);
  }
  return used;
}

void Connection::arm_rto(TimeNs now) {
  // An outstanding READ keeps the timer: its request is acknowledged, but
  // only its response data says the responder is still there.
  if (snd_una_ == snd_nxt_ && !reads_outstanding()) {
    wheel_->cancel(&rto_timer_);
    return;
  }
  wheel_->schedule(&rto_timer_, now + rtt_.rto());
}

void Connection::rto_thunk(Timer* t, TimeNs now) {
  Connection* c = static_cast<Connection*>(t->owner);
  c->on_rto(now);
  c->poke();
}

void Connection::ack_thunk(Timer* t, TimeNs) {
  Connection* c = static_cast<Connection*>(t->owner);
  if (c->unacked_packets_ > 0) c->ack_due_ = true;
  c->poke();
}

void Connection::hold_thunk(Timer* t, TimeNs) {
  static_cast<Connection*>(t->owner)->poke();  // the hold expired: requests may go again
}
void Connection::probe_thunk(Timer* t, TimeNs now) {
  Connection* c = static_cast<Connection*>(t->owner);
  c->on_probe(now);
  c->poke();
}
void Connection::on_probe(TimeNs now) {
  if (state_ != ConnectionState::kActive || (!multi() && qp_.held(now))) return;
  // Only at a tail: with new data to send, later packets show losses.
  if (!at_tail()) return;
  constexpr uint32_t kMaxProbed = 4;
  uint32_t probed = 0;
  for (uint32_t psn = snd_una_; psn != snd_nxt_ && probed < kMaxProbed; ++psn) {
    TxRecord& r = rec(psn);
    if (r.state != TxState::kInFlight || r.tx_count != 1 || r.sent_at + probe_timeout() > now) {
      continue;
    }
    if (r.kind == TxKind::kRequest && qp_of(r).held(now)) continue;
    r.state = TxState::kLost;
    sub_inflight(charge(r));
    queue_retransmit(r);
    ++stats_.tail_probes;
    ++probed;
  }
}

void Connection::credit_thunk(Timer* t, TimeNs now) {
  Connection* c = static_cast<Connection*>(t->owner);
  if (c->state_ != ConnectionState::kActive) return;
  // Credit asked for and not all granted: the timer keeps watch. If the
  // connection is held up for want of it, a CREDIT_REQ or the CREDIT that
  // answered it may have been lost (both carry cumulative counts, so
  // asking again is safe): it asks again, and the wait doubles each time,
  // up to the RTO's maximum.
  if (!credit_after(c->credit_.last_asked(), c->credit_.granted())) return;
  const bool backlog = c->unsent_credit_ > 0 || c->retx_count_ > 0;
  if (backlog && c->credit_.available() <= 0 && now - c->last_grant_at_ >= c->first_credit_wait()) {
    // A peer that answers neither this nor anything else is gone: the wait
    // spends the retry budget as a timeout does (a peer that answers, even
    // to say it has granted all it will for now, is there).
    const TimeNs heard = std::max(c->credit_heard_at_, c->progress_at_);
    if (heard > c->credit_heard_at_) {
      c->credit_heard_at_ = heard;
      c->credit_retries_ = 0;
    }
    if (c->retries_spent(&c->credit_retries_, heard, now)) {
      c->set_error(WcStatus::kRetryExcErr);
      return;
    }
    c->credit_req_forced_ = true;
    ++c->stats_.credit_stalls;
    c->credit_wait_ =
        std::min(std::max(c->credit_wait_ * 2, c->first_credit_wait()), c->cfg_.rto_max_ns);
  }
  c->wheel_->schedule(&c->credit_timer_, now + std::max(c->credit_wait_, c->first_credit_wait()));
  c->poke();
}

void Connection::credit_check() {
  if (state_ != ConnectionState::kActive || credit_req_due_) return;
  if (credit_req_forced_) {
    credit_req_due_ = true;
    return;
  }
  const uint32_t target = credit_.target(unsent_credit_, retx_credit_);
  // New data is asked for two packets at a time; a retransmission at once
  // (it holds back completion of everything after it).
  const uint32_t step = retx_credit_ > 0 ? 1 : 2 * (cfg_.mtu + credit_header());
  if (credit_.request_due(target, step)) credit_req_due_ = true;
}

void Connection::on_credit_ctrl(const wire::ParsedPacket& pkt, TimeNs now) {
  if (pkt.payload_len < 4) {
    ++stats_.malformed_ctrl;
    return;
  }
  const uint32_t value = wire::load_be32(pkt.payload);
  if (pkt.ctrl.pro.next_hdr == static_cast<uint8_t>(wire::CtrlType::kCredit)) {
    if (!credit_on_) return;  // we never asked
    credit_heard_at_ = now;   // the peer is there
    credit_retries_ = 0;
    if (credit_.on_grant(value)) {
      ++stats_.credits_received;
      if (last_grant_at_ != 0) grant_gap_ = (7 * grant_gap_ + (now - last_grant_at_)) / 8;
      last_grant_at_ = now;
      credit_wait_ = 0;
      credit_req_forced_ = false;
    }
    return;
  }
  // A CREDIT_REQ: the peer's cumulative demand.
  ++stats_.credit_requests_received;
  const CreditGrantor::Request r = grantor_.on_request(value, rtt_.rto(), cfg_.rto_max_ns, now);
  if (r.forgiven) ++stats_.credit_forgiven;
  stats_.credit_bytes_granted += r.granted;
}

uint32_t Connection::grant_credit(uint32_t max_bytes, bool* more, TimeNs now) {
  *more = false;
  if (state_ != ConnectionState::kActive) return 0;
  bool capped = false;
  const uint32_t g =
      grantor_.grant(max_bytes, cfg_.mtu + credit_header(), credit_cap(), more, &capped, now);
  if (capped) ++stats_.credit_capped;
  if (g == 0) return 0;
  stats_.credit_bytes_granted += g;
  poke();
  return g;
}

uint32_t Connection::credit_cap() const {
  const uint32_t cap = cfg_.cc.credit_unused_cap_bytes;
  if (cap == 0) return 0;
  return static_cast<uint32_t>(
      std::min<uint64_t>(std::max<uint64_t>(cap, 2 * cfg_.cc.bdp_bytes()), 1u << 30));
}

bool Connection::end_stale_reads(TimeNs now) {
  if (cfg_.retry_forever) {
    stale_reads_at_ = kNever;  // waits for good, as a single QP's READ timer does
  } else if (now >= stale_reads_at_) {
    TimeNs next = kNever;
    for (uint16_t slot = 0; slot < qps_.size(); ++slot) {
      QueuePair& q = *qps_[slot];
      if (q.state() != ConnectionState::kActive || q.reads_outstanding() == 0) continue;
      // Only a READ the peer has taken in order is the responder's to
      // answer: one behind a hole (another queue pair's RNR wait, a
      // refusal while the QP was not there) waits for it, and its ACK
      // starts the clock (after_progress_multi).
      uint32_t psn = 0;
      if (!q.oldest_read_psn(&psn) || !psn_lt(psn, snd_una_)) {
        next = std::min(next, now + retry_budget());
        continue;
      }
      const TimeNs due = q.read_heard_at() + retry_budget();
      if (due <= now) {
        ++stats_.read_timeouts;
        stop_qp(slot, WcStatus::kRetryExcErr);
      } else {
        next = std::min(next, due);
      }
    }
    stale_reads_at_ = next;
  }
  return state_ == ConnectionState::kActive && reads_outstanding();
}

void Connection::on_read_timeout(TimeNs now) {
  if (multi() || cfg_.shared) {
    // Each queue pair's READs on their own: one whose responder went ends
    // that queue pair after the retry budget, not the PDC.
    if (end_stale_reads(now)) wheel_->schedule(&rto_timer_, now + rtt_.rto());
    return;
  }
  // No response data for a whole RTO since the last: the responder may be
  // gone. Spent like a packet's retries (the responder resends lost
  // responses itself; this only bounds the wait).
  if (read_progress_at_ + rtt_.rto() > now) {
    wheel_->schedule(&rto_timer_, read_progress_at_ + rtt_.rto());
    return;
  }
  ++stats_.timeouts;
  ++stats_.read_timeouts;
  if (retries_spent(&read_retries_, read_heard_at_, now)) {
    set_error(WcStatus::kRetryExcErr);
    return;
  }
  read_progress_at_ = now;
  rtt_.back_off();
  wheel_->schedule(&rto_timer_, now + rtt_.rto());
}

void Connection::on_rto(TimeNs now) {
  if (state_ != ConnectionState::kActive) return;
  // Requests held back by an RNR wait are the receiver's doing, not loss:
  // they are not charged to the retry budget (rnr_retry counts the
  // episodes). Everything else times out as usual, READ responses included.
  const TimeNs rto = rtt_.rto();
  if (snd_una_ == snd_nxt_) {
    if (reads_outstanding()) on_read_timeout(now);
    return;
  }
  // Several queue pairs: while others keep the PDC busy, a READ whose
  // responder went is found here (the READ timer runs only when idle).
  if (multi() && reads_total_ > 0) [[unlikely]] {
    end_stale_reads(now);
    if (state_ != ConnectionState::kActive) return;
  }
  // Only packets unacknowledged for a whole RTO since their last transmission
  // are lost; if none is (the oldest were resent recently), wait for the
  // first that will be, without backing off.
  bool expired = false;
  TimeNs earliest = kNever;
  // Whose fault is a timeout? Packets that time out on most of the paths
  // at once, with nothing sent after them acknowledged, say the connection
  // stalled (a peer or a host that stopped for a while): no path is blamed
  // for them. Otherwise a packet's path is blamed unless it delivered a
  // packet sent after it: then the path works and this packet (or every
  // ACK that reported it: a link dead in both directions also loses ACKs)
  // was lost on its own. A dead path shows as losses on it alone, mostly
  // inferred long before the timer.
  bool many_paths = false;
  if (paths_.adaptive()) {
    std::bitset<256> on;
    for (uint32_t psn = snd_una_; psn != snd_nxt_; ++psn) {
      const TxRecord& r = rec(psn);
      if (r.state == TxState::kInFlight && r.sent_at + rto <= now) on.set(r.entropy);
    }
    many_paths = on.count() > std::max<size_t>(1, paths_.count() / 2);
  }
  const auto blames_path = [&](const TxRecord& r) {
    if (many_paths && latest_acked_sent_ <= r.sent_at) return false;  // a stall
    return paths_.overtaken_by(r.entropy, r.path_seq) < 0;
  };
  // Our own pacing (a rate cut low) or a full window holding the
  // retransmissions back is not a stalled port.
  const bool self_held = now < peer_->next_send_at() || peer_->pace_armed() ||
                         !window_takes_full_packet() || (credit_on_ && credit_.available() <= 0);
  for (uint32_t psn = snd_una_; psn != snd_nxt_; ++psn) {
    TxRecord& r = rec(psn);
    if (r.state == TxState::kInFlight && r.sent_at + rto <= now) {
      if (!expired) ++stats_.timeouts;
      expired = true;
      mark_lost(r, LossKind::kTimeout, now, blames_path(r));
      if (state_ != ConnectionState::kActive) return;
    } else if (r.state == TxState::kInFlight) {
      earliest = std::min(earliest, r.sent_at + rto);
    } else if (r.state == TxState::kLost && !r.queued_for_retx) {
      r.state = TxState::kInFlight;  // re-enter the queue through mark_lost
      add_inflight(charge(r));
      mark_lost(r, LossKind::kTimeout, now, false);  // blamed when it was lost
      if (state_ != ConnectionState::kActive) return;
    } else if (r.state == TxState::kLost && r.sent_at + rto <= now &&
               !(r.kind == TxKind::kRequest && now < qp_of(r).hold_until() + rto) && !self_held) {
      // Queued for retransmission and still not sent a whole RTO after its
      // last transmission, though neither pacing nor the window holds it:
      // the port takes nothing (a stalled TX ring). It spends the retry
      // budget like a timeout, or the QP would wait on a dead port forever.
      if (!expired) ++stats_.timeouts;
      expired = true;
      if (retries_spent(&r.retries, progress_at_, now)) {
        set_error(WcStatus::kRetryExcErr);
        return;
      }
    }
  }
  if (!expired) {
    wheel_->schedule(&rto_timer_, earliest == kNever ? now + rto : earliest);
    return;
  }
  rtt_.back_off();
  wheel_->schedule(&rto_timer_, now + rtt_.rto());
}

}  // namespace braid

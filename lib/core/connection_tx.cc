// Connection, transmit side: the queue pair's packets numbered and sent with
// their PDS header, the per-packet entropy, window and congestion checks,
// and retransmission of exactly the packets declared lost.
#include <algorithm>
#include <cstring>

#include "core/connection.h"
#include "wire/byte_order.h"
#include "wire/crc32c.h"

namespace braid {

bool Connection::control_due() const {
  if (!mac_known_) return false;
  if (nack_count_ > 0 || ack_due_ || cnp_due_ || ce_ack_count_ > 0 || retx_ack_copies_ > 0 ||
      grantor_.due() || close_answer_due_)
    return true;
  if (credit_req_due_ && state_ == ConnectionState::kActive) return true;
  return state_ == ConnectionState::kActive && hole_acks_due_ > 0;
}

bool Connection::data_ready() const {
  if (!mac_known_ || state_ != ConnectionState::kActive || peer_->pace_armed()) return false;
  if (retx_count_ > 0) {
    if (!credit_on_) return true;
    // A retransmission waits for credit; an entry already acknowledged or
    // resent is popped by produce_data.
    const uint32_t psn = retx_queue_[retx_head_];
    const TxRecord& r = rec(psn);
    return r.psn != psn || r.state != TxState::kLost || !credit_holds(r, true);
  }
  if (multi()) {
    // Whether one of them can go now is next_new_multi's to find.
    if (sending_.empty()) return false;
  } else if (!qp_.responses_pending()) {
    if (credit_on_ && !credit_.may_send(false)) return false;
    if (qp_.all_segmented()) return false;
    if (qp_.start_waits()) return false;  // a fence, or SQD: the next request waits
  }
  if (snd_nxt_ - snd_una_ >= cfg_.window_packets) return false;
  return window_takes_full_packet();
}

uint32_t Connection::produce_control(uint8_t* buf, uint32_t cap, TimeNs now) {
  if (!mac_known_) return 0;
  if (grantor_.due()) {
    const uint32_t n = build_credit_ctrl(buf, cap, wire::CtrlType::kCredit, grantor_.granted());
    if (n > 0) {
      grantor_.sent();
      ++stats_.credits_sent;
    }
    return n;
  }
  if (credit_req_due_ && state_ == ConnectionState::kActive) {
    const uint32_t target = credit_.target(unsent_credit_, retx_credit_);
    const uint32_t n = build_credit_ctrl(buf, cap, wire::CtrlType::kCreditReq, target);
    if (n == 0) return 0;
    credit_req_due_ = credit_req_forced_ = false;
    credit_.asked(target);
    ++stats_.credit_requests_sent;
    if (!credit_timer_.armed()) {
      if (credit_wait_ == 0) credit_wait_ = first_credit_wait();
      wheel_->schedule(&credit_timer_, now + credit_wait_);
    }
    return n;
  }
  if (cnp_due_) return build_cnp(buf, cap);
  if (nack_count_ > 0) return build_nack(buf, cap);
  if (ce_ack_count_ > 0) {
    const uint32_t len = ce_acks_->len[ce_ack_head_];
    if (cap < len) return 0;
    std::memcpy(buf, ce_acks_->frame[ce_ack_head_], len);
    ce_ack_head_ = static_cast<uint8_t>((ce_ack_head_ + 1) % kCeAcks);
    --ce_ack_count_;
    return len;
  }
  if (ack_due_) return build_ack(buf, cap, now);  // also the last one, in error
  if (close_answer_due_) {
    const uint32_t n = build_close_answer(buf, cap);
    if (n > 0) close_answer_due_ = false;
    return n;
  }
  if (retx_ack_copies_ > 0) return build_ack_copy(buf, cap);
  if (state_ != ConnectionState::kActive || hole_acks_due_ == 0) return 0;
  return build_hole_ack(buf, cap);
}

uint32_t Connection::produce_data_frame(TxOut& out, TimeNs now) {
  if (!mac_known_ || state_ != ConnectionState::kActive) return 0;
  if (peer_->cc().pacing_rate_bps() == 0) return produce_data(out, now);
  // One pacing clock for the peer's connections.
  if (peer_->pacing_holds(this, now)) return 0;
  const uint32_t n = produce_data(out, now);
  // The whole frame: with its payload left in place, n is its headers alone.
  if (n > 0) peer_->paced(n + out.payload_len, now);
  return n;
}

uint32_t Connection::produce_responses_only(TxOut& out, TimeNs now) {
  // Lost responses (and NOPs) first. Their queue entries stay where they
  // are (requests wait in front of them); once resent, an entry is skipped
  // when popped.
  for (uint32_t i = 0; i < retx_count_; ++i) {
    const uint32_t psn = retx_queue_[(retx_head_ + i) & retx_mask_];
    TxRecord& r = rec(psn);
    if (r.psn != psn || r.state != TxState::kLost || r.kind == TxKind::kRequest ||
        psn_lt(psn, snd_una_)) {
      continue;
    }
    if (!peer_->window_takes(charge(r))) {
      peer_->wait(this);
      return 0;
    }
    const uint32_t n = build_data(out, r, true, now);
    if (n == 0) return 0;
    r.queued_for_retx = false;
    ++stats_.retransmits;
    return n;
  }
  return qp_.responses_pending() ? produce_new(out, now) : 0;
}

uint32_t Connection::produce_data_slow(TxOut& out, TimeNs now) {
  // An RNR wait holds our requests back, not our answers to the peer's
  // READs (its READ would otherwise time out behind our wait).
  if (!multi() && qp_.held(now)) return produce_responses_only(out, now);
  // Retransmissions first: they hold back completion of everything after them.
  while (retx_count_ > 0) {
    const uint32_t psn = retx_queue_[retx_head_];
    TxRecord& r = rec(psn);
    if (r.psn != psn || r.state != TxState::kLost || psn_lt(psn, snd_una_)) {
      if (r.psn == psn) r.queued_for_retx = false;
      unqueue_retx_credit(r);
      retx_head_ = (retx_head_ + 1) & retx_mask_;
      --retx_count_;
      continue;
    }
    if (!peer_->window_takes(charge(r))) {
      peer_->wait(this);
      return 0;
    }
    if (credit_holds(r, true)) return 0;
    // Several queue pairs: a request of one in its RNR wait (sent again
    // under its own PSN) waits at the head; other queue pairs' new packets go.
    if (multi() && r.kind == TxKind::kRequest && qp_of(r).held(now)) [[unlikely]] {
      arm_hold(qp_of(r).hold_until(), now);
      return produce_retx_past_held(out, now);
    }
    const uint32_t n = build_data(out, r, true, now);
    if (n == 0) return 0;
    r.queued_for_retx = false;
    unqueue_retx_credit(r);
    retx_head_ = (retx_head_ + 1) & retx_mask_;
    --retx_count_;
    ++stats_.retransmits;
    return n;
  }
  return produce_new(out, now);
}

uint32_t Connection::produce_new(TxOut& out, TimeNs now) {
  if (snd_nxt_ - snd_una_ >= cfg_.window_packets) return 0;
  if (!window_takes_full_packet()) {
    peer_->wait(this);
    return 0;
  }
  if (!multi() && credit_on_ && !qp_.responses_pending() && !credit_.may_send(false)) return 0;
  // The caller's buffer may be too small for this packet; a buffer that
  // takes a full MTU takes any (no packet carries more).
  const size_t headers = wire::kL2L4Size + wire::kRequestSize + wire::kSesStandardSize + trailer();
  if (out.cap < headers + cfg_.mtu && (multi() || out.cap < headers + qp_.next_payload_len())) {
    return 0;
  }
  if (snd_nxt_ - snd_una_ >= tx_.size()) grow_tx();
  if (multi()) [[unlikely]]
    return produce_new_multi(out, now);
  TxRecord& r = rec(snd_nxt_);
  Slice slice;
  if (!qp_.next_packet(snd_nxt_, &slice)) return 0;
  take_new(r, slice, 0);
  return build_data(out, r, false, now);
}

uint32_t Connection::produce_retx_past_held(TxOut& out, TimeNs now) {
  // As produce_responses_only: an entry resent here stays in the queue and
  // is skipped when popped.
  for (uint32_t i = 1; i < retx_count_; ++i) {
    const uint32_t psn = retx_queue_[(retx_head_ + i) & retx_mask_];
    TxRecord& r = rec(psn);
    if (r.psn != psn || r.state != TxState::kLost || psn_lt(psn, snd_una_)) continue;
    if (r.kind == TxKind::kRequest && qp_of(r).held(now)) continue;
    if (!peer_->window_takes(charge(r))) {
      peer_->wait(this);
      return 0;
    }
    if (credit_holds(r, true)) continue;
    const uint32_t n = build_data(out, r, true, now);
    if (n == 0) return 0;
    r.queued_for_retx = false;
    ++stats_.retransmits;
    return n;
  }
  return produce_new(out, now);
}

// Several queue pairs: produce_new's second half, with the packet's queue
// pair found by turns and reached through the table, in one call.
uint32_t Connection::produce_new_multi(TxOut& out, TimeNs now) {
  TxRecord& r = rec(snd_nxt_);
  Slice slice;
  uint16_t slot = 0;
  if (!next_new_multi(&slice, &slot, now)) return 0;
  take_new(r, slice, slot);
  return build_data_with<true>(out, r, false, now);
}

bool Connection::next_new_multi(Slice* s, uint16_t* slot, TimeNs now) {
  const bool credit_blocks = credit_on_ && !credit_.may_send(false);
  for (size_t n = sending_.size(); n > 0; --n) {
    const uint16_t id = sending_.front();
    QueuePair& q = *qps_[id];
    if (q.state() != ConnectionState::kActive || q.all_segmented()) {
      sending_.pop();
      turn_used_ = 0;
      continue;
    }
    // Requests wait for credit and for their RNR wait; READ responses do not.
    const bool held = q.held(now);
    if (held) arm_hold(q.hold_until(), now);
    const bool requests_ok = !held && !credit_blocks;
    if (q.next_packet(snd_nxt_, s, requests_ok)) {
      // A turn is kQpTurn packets: the queue pair stays in front until it
      // has used them (or has nothing more), then goes behind the others.
      if (q.all_segmented()) {
        sending_.pop();
        turn_used_ = 0;
      } else if (++turn_used_ >= kQpTurn) {
        sending_.pop();
        sending_.push(id);
        turn_used_ = 0;
      }
      *slot = id;
      return true;
    }
    // Blocked (a fence, the READ limit, a wait): it keeps its place.
    sending_.pop();
    sending_.push(id);
    turn_used_ = 0;
  }
  return false;
}

uint32_t Connection::build_data(TxOut& out, TxRecord& r, bool retx, TimeNs now) {
  // The connection's own queue pair by name, the others through the table:
  // a pointer that might be either costs the common case reloads.
  if (r.qp != 0) [[unlikely]]
    return build_data_other(out, r, retx, now);
  return build_data_with<false>(out, r, retx, now);
}

uint32_t Connection::build_data_other(TxOut& out, TxRecord& r, bool retx, TimeNs now) {
  return build_data_with<true>(out, r, retx, now);
}

template <bool kTable>
uint32_t Connection::build_data_with(TxOut& out, TxRecord& r, bool retx, TimeNs now) {
  uint8_t* const buf = out.buf;
  const Slice slice{r.seq, r.offset, r.len, r.kind};
  QueuePair& qp = kTable ? *qps_[r.qp] : qp_;
  const bool response = r.kind == TxKind::kReadResponse;
  const size_t ses_size = qp.ses_size(slice);
  const QueuePair::Source src = qp.source(slice);
  const size_t udp_payload = wire::kRequestSize + ses_size + src.payload_len + trailer();
  if (wire::kL2L4Size + udp_payload > out.cap) return 0;
  // Credit pays for the whole frame; without credit it goes unscheduled,
  // and says so.
  const bool unscheduled = credit_on_ && r.kind == TxKind::kRequest &&
                           credit_.spend(static_cast<uint32_t>(wire::kL2L4Size + udp_payload));
  if (unscheduled) ++stats_.unscheduled_sent;

  const uint8_t e = retx ? paths_.choose_retransmit(r.entropy, now) : paths_.choose(now);
  r.entropy = e;
  r.path_seq = paths_.on_sent(e);

  uint8_t* p = buf + wire::kL2L4Size;
  wire::RequestHeader pds;
  pds.pro.type = static_cast<uint8_t>(wire::PdsType::kRudReq);
  pds.pro.next_hdr = static_cast<uint8_t>(response ? wire::NextHeader::kSesResponseData
                                                   : wire::NextHeader::kSesStandard);
  pds.pro.flags = (retx ? wire::kReqFlagRetx : 0) | (unscheduled ? wire::kReqFlagUnscheduled : 0);
  pds.psn = r.psn;
  pds.spdcid = name_src_;
  pds.dpdcid = name_dst_;
  const uint8_t* in_place = nullptr;
  const bool read =
      qp.write_packet(slice, src, tx_job_id_, out.in_place_ok && payload_by_reference(),
                      p + wire::kRequestSize, &in_place);
  uint32_t in_place_len = 0;  // payload bytes left where they lie
  if (in_place != nullptr) {
    out.payload = in_place;
    out.payload_len = in_place_len = src.payload_len;
    prefetch_for_read(in_place, in_place_len);
  }
  if (read) {
    read_progress_at_ = read_heard_at_ = now;
    qp.note_read_heard(now);
    stale_reads_at_ = std::min(stale_reads_at_, now + retry_budget());
  }
  // Ask for an immediate ACK when nothing else will follow soon: the last
  // packet queued, a retransmission, or a window about to close. Otherwise
  // the receiver coalesces.
  const bool idle_after = at_tail() && retx_count_ <= 1;
  const bool window_closing =
      peer_->inflight() + 2 * (cfg_.mtu + kPacketCharge) > peer_->cc().cwnd_bytes() ||
      snd_nxt_ - snd_una_ + 1 >= cfg_.window_packets;
  // A probe of a set-aside path too: its ACK, named after it, carries the
  // receiver's hold, so the probe is judged on its path's own delay.
  const bool probe = !retx && paths_.take_probe();
  if (retx || idle_after || window_closing || probe) {
    pds.pro.flags |= wire::kReqFlagAckReq;
  }
  wire::encode_request(p, pds);
  const uint32_t frame_len =
      finish_frame(buf, udp_payload - trailer(), paths_.entropy(e), wire::kEcnEct0);

  if (r.psn == snd_una_ && r.tx_count == 0) progress_at_ = now;  // the first outstanding
  r.sent_at = now;
  r.state = TxState::kInFlight;
  ++r.tx_count;
  add_inflight(charge(r));
  if (!rto_timer_.armed()) wheel_->schedule(&rto_timer_, now + rtt_.rto());
  // The last new packet for now: if packets at the tail are lost, nothing
  // sent later will show it. A probe resends them after two RTTs (once).
  if (!retx && idle_after && rtt_.srtt() > 0)
    wheel_->schedule(&probe_timer_, now + probe_timeout());
  return frame_len - in_place_len;  // the bytes in buf
}

void Connection::add_trailer(uint8_t* p, size_t body) const {
  if (cfg_.auth) {
    // (A failure of libcrypto leaves a frame the peer drops: resent.)
    // Without a key (they went to a closing record: give_keys) the frame
    // keeps the room for the seal, which the record adds at each send.
    if (tx_key_ != nullptr) tx_key_->seal(p, body, cfg_.local_ip, cfg_.remote_ip);
  } else {
    p[1] |= wire::kFlagCrcTrailer;  // the prologue says a trailer follows
    wire::store_be32(p + body, wire::crc32c(p, body));
  }
}

uint32_t Connection::finish_frame(uint8_t* buf, size_t body, uint16_t entropy, uint8_t tos) const {
  uint8_t* p = buf + wire::kL2L4Size;
  if (trailer_bytes_ != 0) [[unlikely]]
    add_trailer(p, body);
  const size_t udp_payload = body + trailer();
  frame_.write(buf, entropy, static_cast<uint32_t>(udp_payload), tos);
  return static_cast<uint32_t>(wire::kL2L4Size + udp_payload);
}

void Connection::mark_lost(TxRecord& r, LossKind why, TimeNs now, bool blame) {
  if (r.state != TxState::kInFlight) return;
  r.state = TxState::kLost;
  sub_inflight(charge(r));
  paths_.on_lost(r.entropy, why, now, rtt_.srtt(), blame);
  switch (why) {
    case LossKind::kInferred:
      ++stats_.lost_inferred;
      break;
    case LossKind::kTrimmed:
      ++stats_.lost_nacked;
      break;
    case LossKind::kTimeout:
      ++stats_.lost_timeout;
      if (retries_spent(&r.retries, progress_at_, now)) {
        set_error(WcStatus::kRetryExcErr);
        return;
      }
      break;
  }
  peer_->cc().on_loss(LossEvent{now, charge(r), why, r.entropy, peer_->inflight()});
  queue_retransmit(r);
}

void Connection::queue_retransmit(TxRecord& r) {
  if (r.queued_for_retx) return;
  // Drop entries of packets acknowledged meanwhile if the ring is full; a
  // live entry dropped here is queued again by the next RTO.
  while (retx_count_ > retx_mask_) {
    TxRecord& old = rec(retx_queue_[retx_head_]);
    if (old.psn == retx_queue_[retx_head_]) old.queued_for_retx = false;
    unqueue_retx_credit(old);
    retx_head_ = (retx_head_ + 1) & retx_mask_;
    --retx_count_;
  }
  r.queued_for_retx = true;
  if (credit_on_ && r.kind == TxKind::kRequest) retx_credit_ += r.len + credit_header();
  retx_queue_[(retx_head_ + retx_count_) & retx_mask_] = r.psn;
  ++retx_count_;
}

void Connection::unqueue_retx_credit(const TxRecord& r) {
  if (!credit_on_) return;
  // An entry whose slot was reused counts the new packet's size: the sum
  // may drift a little, never below zero, and is reset when the queue empties.
  if (r.kind == TxKind::kRequest) {
    retx_credit_ -= std::min<uint64_t>(retx_credit_, r.len + credit_header());
  }
  if (retx_count_ <= 1) retx_credit_ = 0;
}

uint32_t Connection::build_credit_ctrl(uint8_t* buf, uint32_t cap, wire::CtrlType type,
                                       uint32_t value) {
  if (cap < wire::kL2L4Size + wire::kCtrlSize + 4 + trailer()) return 0;
  wire::CtrlHeader h;
  h.pro.type = static_cast<uint8_t>(wire::PdsType::kCtrl);
  h.pro.next_hdr = static_cast<uint8_t>(type);
  // A CREDIT names our cumulative received PSN (the peer's data), a
  // CREDIT_REQ the last PSN we sent: each in a space its receiver checks.
  h.psn = type == wire::CtrlType::kCreditReq ? snd_nxt_ - 1 : rx_.cack();
  h.spdcid = name_src_;
  h.dpdcid = name_dst_;
  uint8_t* p = buf + wire::kL2L4Size;
  wire::encode_ctrl(p, h);
  wire::store_be32(p + wire::kCtrlSize, value);  // UET's 4-byte CTRL payload
  return finish_frame(buf, wire::kCtrlSize + 4, paths_.control_port(),
                      static_cast<uint8_t>(wire::kDscpAck << 2));
}

}  // namespace braid

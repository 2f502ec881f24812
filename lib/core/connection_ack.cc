// Connection, acknowledgements: when the receiver ACKs (coalesced, or at once
// on a gap, a duplicate, ECN-CE or an ACK request), what an ACK_CC carries
// (cumulative PSN, the triggering packet, a 64-bit SACK window), and how the
// sender uses ACKs and NACKs: RTT samples, per-entropy statistics, and loss
// inferred from gaps on each entropy.
#include <algorithm>
#include <climits>

#include "core/connection.h"

namespace braid {

void Connection::schedule_ack(bool immediate, TimeNs now) {
  if (immediate || unacked_packets_ >= cfg_.ack_every) {
    if (immediate && ack_asked_ != nullptr) ack_asked_->note();
    ack_due_ = true;
    return;
  }
  if (!ack_timer_.armed()) wheel_->schedule(&ack_timer_, now + cfg_.ack_delay_ns);
}

uint32_t Connection::build_ack(uint8_t* buf, uint32_t cap, TimeNs now) {
  (void)now;
  if (cap < wire::kL2L4Size + wire::kAckCcSize + trailer()) return 0;
  const uint32_t cack = rx_.cack();
  uint32_t trigger = ack_trigger_psn_, base = 0;
  ack_block(&trigger, &base);
  const uint8_t flags =
      (ack_trigger_ecn_ ? wire::kAckFlagEcn : 0) | (ack_trigger_retx_ ? wire::kAckFlagRetx : 0);
  const TimeNs held = now > ack_trigger_at_ ? now - ack_trigger_at_ : 0;
  const uint32_t len = write_ack(buf, trigger, base, flags, held);
  if (ack_trigger_retx_) {
    retx_ack_copies_ = kRetxAckCopies;
    retx_ack_trigger_ = trigger;
  }
  ack_due_ = false;
  unacked_packets_ = 0;
  ack_trigger_ecn_ = false;
  ack_trigger_retx_ = false;
  wheel_->cancel(&ack_timer_);
  // Holes below the block just reported are out of its reach: follow with
  // ACKs that report them, a block each, so that a burst loss longer than
  // one bitmap is inferred within a round trip, not one hole per ACK.
  sack_top_ = base;
  hole_acks_due_ = psn_lt(cack + 1, base) ? kHoleAcksPerAck : 0;
  return len;
}

uint32_t Connection::build_ack_copy(uint8_t* buf, uint32_t cap) {
  if (cap < wire::kL2L4Size + wire::kAckCcSize + trailer()) return 0;
  --retx_ack_copies_;
  uint32_t trigger = retx_ack_trigger_, base = 0;
  ack_block(&trigger, &base);
  return write_ack(buf, trigger, base, wire::kAckFlagRetx, 0);
}

void Connection::ack_block(uint32_t* trigger, uint32_t* base) const {
  const uint32_t cack = rx_.cack();
  // The ACK names its triggering packet even when that packet just moved the
  // cumulative point past itself: Braid reads ack_psn_offset as signed.
  const int32_t offset = psn_diff(*trigger, cack);
  if (offset < INT16_MIN || offset > INT16_MAX) *trigger = cack;
  // The 64 PSNs ending at the triggering packet, or starting just above cack.
  *base = psn_diff(*trigger, cack) <= 64 ? cack + 1 : *trigger - 63;
}

uint32_t Connection::build_hole_ack(uint8_t* buf, uint32_t cap) {
  if (cap < wire::kL2L4Size + wire::kAckCcSize + trailer()) return 0;
  const uint32_t cack = rx_.cack();
  // The blocks from cack + 1 up to the last reported block, round-robin
  // from where the previous hole ACK stopped; blocks with no hole are
  // skipped.
  const uint32_t blocks = (psn_diff(sack_top_, cack + 1) + 63) / 64;
  if (psn_le(sack_top_, cack + 1)) {
    hole_acks_due_ = 0;
    return 0;
  }
  for (uint32_t i = 0; i < blocks; ++i) {
    if (!(psn_lt(cack, sack_cursor_) && psn_lt(sack_cursor_, sack_top_))) sack_cursor_ = cack + 1;
    const uint32_t base = sack_cursor_;
    sack_cursor_ += 64;
    const uint32_t span = std::min<uint32_t>(64, psn_diff(sack_top_, base));
    const uint64_t full = span == 64 ? ~uint64_t{0} : (uint64_t{1} << span) - 1;
    if ((rx_.sack_bits(base) & full) == full) continue;  // nothing missing here
    --hole_acks_due_;
    return write_ack(buf, cack, base, 0, 0);
  }
  hole_acks_due_ = 0;
  return 0;
}

uint32_t Connection::write_ack(uint8_t* buf, uint32_t trigger, uint32_t base, uint8_t flags,
                               TimeNs held) {
  const uint32_t cack = rx_.cack();
  wire::AckHeader a;
  a.pro.type = static_cast<uint8_t>(wire::PdsType::kAckCc);
  a.pro.next_hdr = 0;
  a.pro.flags = flags;
  a.ack_psn_offset = static_cast<uint16_t>(trigger - cack);
  a.cack_psn = cack;
  a.spdcid = name_src_;
  a.dpdcid = name_dst_;
  a.cc_type = static_cast<uint8_t>(wire::CcType::kNscc);
  a.mpr = static_cast<uint8_t>(std::countr_zero(rx_.window()));  // log2 of the window
  a.sack_psn_offset = static_cast<uint16_t>(base - cack);
  a.sack_bitmap = rx_.sack_bits(base);
  a.nscc.rcvd_bytes = rcvd_bytes_ & 0xffffff;
  a.nscc.service_time =
      static_cast<uint16_t>(std::min<TimeNs>(held / wire::kServiceTimeUnitNs, 0xffff));
  a.nscc.ooo_count = static_cast<uint16_t>(std::min<uint32_t>(rx_.held_out_of_order(), 0xffff));
  wire::encode_ack(buf + wire::kL2L4Size, a);
  ++stats_.acks_sent;
  return finish_frame(buf, wire::kAckCcSize, paths_.control_port(),
                      static_cast<uint8_t>(wire::kDscpAck << 2));
}

uint32_t Connection::build_nack(uint8_t* buf, uint32_t cap) {
  if (cap < wire::kL2L4Size + wire::kNackSize + trailer()) return 0;
  const PendingNack n = nacks_[0];
  for (uint32_t i = 1; i < nack_count_; ++i) nacks_[i - 1] = nacks_[i];
  --nack_count_;
  wire::NackHeader h;
  h.pro.type = static_cast<uint8_t>(wire::PdsType::kNack);
  h.pro.flags = n.flags;
  h.nack_code = n.code;
  h.vendor_code = n.vendor;
  h.nack_psn = n.psn;
  h.payload = n.payload;
  h.spdcid = name_src_;
  h.dpdcid = name_dst_;
  wire::encode_nack(buf + wire::kL2L4Size, h);
  return finish_frame(buf, wire::kNackSize, paths_.control_port(),
                      static_cast<uint8_t>(wire::kDscpAck << 2));
}

// A 12-byte CTRL of `type` that carries our cumulative received PSN.
uint32_t Connection::build_cack_ctrl(uint8_t* buf, uint32_t cap, wire::CtrlType type) {
  if (cap < wire::kL2L4Size + wire::kCtrlSize + trailer()) return 0;
  wire::CtrlHeader h;
  h.pro.type = static_cast<uint8_t>(wire::PdsType::kCtrl);
  h.pro.next_hdr = static_cast<uint8_t>(type);
  h.psn = rx_.cack();
  h.spdcid = name_src_;
  h.dpdcid = name_dst_;
  wire::encode_ctrl(buf + wire::kL2L4Size, h);
  return finish_frame(buf, wire::kCtrlSize, paths_.control_port(),
                      static_cast<uint8_t>(wire::kDscpAck << 2));
}

uint32_t Connection::build_cnp(uint8_t* buf, uint32_t cap) {
  const uint32_t n = build_cack_ctrl(buf, cap, wire::CtrlType::kCnp);
  if (n > 0) {
    cnp_due_ = false;
    ++stats_.cnps_sent;
  }
  return n;
}

uint32_t Connection::build_close(uint8_t* buf, uint32_t cap) {
  return mac_known_ ? build_cack_ctrl(buf, cap, wire::CtrlType::kBraidClose) : 0;
}

uint32_t Connection::build_close_answer(uint8_t* buf, uint32_t cap) {
  if (!mac_known_ || cap < wire::kL2L4Size + wire::kAckCcSize + trailer()) return 0;
  const uint32_t cack = rx_.cack();
  return write_ack(buf, cack, cack + 1, wire::kAckFlagProbe, 0);
}

void Connection::on_close(uint32_t cack, TimeNs now) {
  // Our peer's CLOSE names what it received in order: at least what it
  // acknowledged (snd_una_ - 1), at most what we sent. The endpoint
  // answered any other statelessly and did not pass it on
  // (Endpoint::receive): our peer is not taken for closed by one from an
  // earlier connection on the same ids, or from a stranger.
  // As a cumulative ACK (without SACK, RTT sample or congestion signal:
  // the peer is going).
  if (state_ == ConnectionState::kActive && psn_lt(snd_una_, cack + 1)) {
    uint32_t acked = 0, flight = 0;
    const uint32_t from = snd_una_;
    for (uint32_t psn = snd_una_; psn != cack + 1; ++psn) {
      ack_record(rec(psn), &acked, &flight, false, now);
    }
    sub_inflight(flight);
    snd_una_ = cack + 1;
    progress_at_ = now;
    arm_rto(now);
    after_progress(from, now);
  }
  peer_closed_ = true;
  close_answer_due_ = true;
}

void Connection::ack_record(TxRecord& r, uint32_t* acked_bytes, uint32_t* flight_bytes, bool marked,
                            TimeNs now, TimeNs held) {
  if (r.state == TxState::kInFlight) {
    *flight_bytes += charge(r);
  } else if (r.state != TxState::kLost) {
    return;
  }
  r.state = TxState::kAcked;
  *acked_bytes += charge(r);
  if (r.tx_count == 1 && r.sent_at > latest_acked_sent_) latest_acked_sent_ = r.sent_at;
  // The receiver held the ACK `held` after the packet it names arrived, and
  // this packet (arrived no later) at least as long: what is left is an
  // upper bound of its path's delay, the same measure its RTT samples take.
  const TimeNs since = now > r.sent_at ? now - r.sent_at : 0;
  paths_.on_acked(r.entropy, r.path_seq, r.tx_count == 1, marked, now,
                  since > held ? since - held : since);
}

void Connection::on_spurious_timeout() {
  // The timer fired while the packet was on its way (a queue that grew
  // faster than srtt + 4 rttvar followed): the RTO it backed off to stays
  // the least for a while, and what that timeout queued for resending and
  // has not resent yet goes back in flight instead.
  ++stats_.spurious_timeouts;
  rtt_.on_spurious_timeout();
  peer_->cc().on_spurious_timeout();
  for (uint32_t psn = snd_una_; psn != snd_nxt_; ++psn) {
    TxRecord& r = rec(psn);
    if (r.state == TxState::kLost && r.retries > 0 && r.tx_count == 1) {
      r.state = TxState::kInFlight;  // its queue entry is skipped when popped
      add_inflight(charge(r));
    }
  }
}

void Connection::on_ack_packet(const wire::ParsedPacket& pkt, TimeNs now) {
  if (!admits(pkt)) return;
  if (state_ == ConnectionState::kActive) on_ack(pkt, now);
  poke();
}

void Connection::on_ack(const wire::ParsedPacket& pkt, TimeNs now) {
  const wire::AckHeader& a = pkt.ack;
  ++stats_.acks_received;
  const uint32_t cack = a.cack_psn;
  // An ACK may only cover PSNs we sent.
  if (!psn_lt(cack, snd_nxt_) || psn_lt(cack + 1, snd_una_ - cfg_.window_packets)) {
    ++stats_.bad_acks;
    return;
  }
  const uint32_t trigger = cack + static_cast<uint32_t>(static_cast<int16_t>(a.ack_psn_offset));
  const bool ecn = (a.pro.flags & wire::kAckFlagEcn) != 0;
  TxRecord* sample = nullptr;
  if (psn_le(snd_una_, trigger) && psn_lt(trigger, snd_nxt_)) {
    TxRecord& t = rec(trigger);
    if (t.psn == trigger && t.retries > 0 && t.state != TxState::kAcked &&
        !(a.pro.flags & wire::kAckFlagRetx)) [[unlikely]] {
      on_spurious_timeout();  // the ACK names the first copy of a packet we timed out
    }
    if (t.psn == trigger) {
      if (t.state == TxState::kInFlight && t.tx_count == 1) sample = &t;
      if (ecn) paths_.on_ecn(t.entropy);
      // Named by the ACK that first covers it (hole ACKs and copies name
      // packets already acknowledged).
      if (t.tx_count == 1 && t.state != TxState::kAcked) paths_.on_named(t.entropy, ecn);
    }
  }
  // The receiver says how long the packet waited for its ACK there (a
  // coalesced ACK): that is not the network's delay. A service time as long
  // as the whole round trip cannot be right: no sample then.
  uint64_t rtt = 0, base_sample = 0;
  const uint64_t held = uint64_t{a.nscc.service_time} * wire::kServiceTimeUnitNs;
  if (sample != nullptr) {
    const uint64_t total = now - sample->sent_at;
    if (total > held) {
      rtt = total - held;
      // Both ends stamp a packet at the start of the poll that handles it,
      // not when it leaves: a hold that is most of the round trip may
      // cover the wire's own time. Such a sample bounds the base RTT by
      // the whole round trip only.
      base_sample = held <= total / 4 ? rtt : total;
    } else {
      sample = nullptr;
    }
  }
  const uint8_t sample_entropy = sample != nullptr ? sample->entropy : 0;
  // How much later than it the newest packet acknowledged so far was sent.
  const TimeNs late = sample != nullptr && latest_acked_sent_ > sample->sent_at
                          ? latest_acked_sent_ - sample->sent_at
                          : 0;

  uint32_t acked = 0, flight = 0;
  bool progress = false;
  const uint32_t from = snd_una_;
  if (psn_lt(snd_una_, cack + 1)) {
    for (uint32_t psn = snd_una_; psn != cack + 1; ++psn) {
      ack_record(rec(psn), &acked, &flight, ecn && psn == trigger, now, held);
    }
    snd_una_ = cack + 1;
    progress_at_ = now;
    progress = true;
  }
  uint32_t highest = cack;
  if (a.has_sack && a.sack_bitmap != 0) {
    const uint32_t base = cack + static_cast<uint32_t>(static_cast<int16_t>(a.sack_psn_offset));
    uint64_t bits = a.sack_bitmap;
    while (bits != 0) {
      const uint32_t i = static_cast<uint32_t>(std::countr_zero(bits));
      bits &= bits - 1;
      const uint32_t psn = base + i;
      if (psn_lt(psn, snd_una_) || !psn_lt(psn, snd_nxt_)) continue;
      ack_record(rec(psn), &acked, &flight, ecn && psn == trigger, now, held);
      highest = psn;
    }
  }
  if (psn_lt(highest_sacked_, highest)) highest_sacked_ = highest;
  sub_inflight(flight);

  if (sample != nullptr) {
    paths_.on_rtt(sample_entropy, rtt, now, late);
    rtt_.sample(rtt);
  }
  AckEvent ev;
  ev.now = now;
  ev.acked_bytes = acked;
  ev.rtt_ns = rtt;
  ev.base_sample_ns = base_sample;
  ev.ecn = ecn;
  ev.inflight_bytes = peer_->inflight();
  ev.entropy = sample_entropy;
  peer_->cc().on_ack(ev);

  if (progress) {
    rtt_.on_progress();
    arm_rto(now);
    after_progress(from, now);
    if (state_ != ConnectionState::kActive) return;
  }
  // Loss inference only from the freshest ACK: ACKs travel on several paths
  // and an older one may arrive last, reporting as missing what has since
  // arrived. rcvd_bytes only grows at the receiver (mod 2^24).
  const uint32_t rb = a.nscc.rcvd_bytes & 0xffffff;
  const bool fresh = !seen_ack_ || ((rb - freshest_rcvd_bytes_) & 0x800000) == 0;
  if (fresh) {
    freshest_rcvd_bytes_ = rb;
    seen_ack_ = true;
  }
  if (fresh && a.has_sack && psn_lt(snd_una_, highest_sacked_)) {
    detect_losses(cack + static_cast<uint32_t>(static_cast<int16_t>(a.sack_psn_offset)), now);
  }
}

void Connection::rnr_refill(TxRecord& r) {
  nop_fill(r, true);
}

void Connection::qp_not_ready(TxRecord& r, TimeNs now) {
  // The peer's queue pair is not there yet (a shared PDC): the receiver
  // takes nothing but a NO_OP at this PSN, so the part goes again under a
  // new PSN whatever it is and however often it was sent, after a wait
  // that grows as a timeout's would.
  QueuePair& q = qp_of(r);
  if (q.state() != ConnectionState::kActive) return;
  if (now >= q.hold_until()) {
    const uint8_t tries = q.rnr_tries(r.seq);
    if (!cfg_.retry_forever && tries > cfg_.retry_limit + 3) {
      stop_qp(r.qp, WcStatus::kRetryExcErr);
      return;
    }
    q.rnr_try(r.seq, 255);
    q.hold(now + qp_not_ready_wait(tries));
    arm_hold(q.hold_until(), now);
  }
  if (r.state != TxState::kAcked) nop_fill(r, true, true);
}

void Connection::nop_fill(TxRecord& r, bool resend, bool any_opcode) {
  // The peer took nothing of this packet and holds its PSN open: a NOP
  // fills it at once (nothing of the PSN space waits for the receive), and
  // the part of the request goes again under a new PSN after the wait.
  // Only for a packet sent once: no other copy can be taken meanwhile, so
  // the receiver places each part once (and counts it once).
  // Not a network loss: no congestion signal, no retry count.
  if (r.state == TxState::kInFlight) {
    sub_inflight(charge(r));
    r.state = TxState::kLost;
  }
  if (r.queued_for_retx) unqueue_retx_credit(r);  // queued as a request: the NOP needs no credit
  r.retries = 0;  // (a spurious timeout must not take it for a first copy still on its way)
  if (resend && qp_of(r).resend(Slice{r.seq, r.offset, r.len, TxKind::kRequest}, any_opcode)) {
    if (credit_on_) unsent_credit_ += r.len + credit_header();
    if (multi()) sending_.push(r.qp);
  }
  r.kind = TxKind::kNop;
  r.len = 0;
  r.offset = 0;
  queue_retransmit(r);
}

void Connection::detect_losses(uint32_t base, TimeNs now) {
  // A packet the ACK reports missing is lost when a packet sent after it on
  // the same entropy has been acknowledged: one entropy is one path, and
  // paths keep order. PSNs the ACK says nothing about are not judged.
  const uint32_t thresh = std::max<uint32_t>(cfg_.path_reorder_threshold, 1);
  uint32_t from = snd_una_;
  if (psn_lt(from, base)) {
    judge_loss(rec(from), thresh, now);  // the first hole: cack + 1
    if (state_ != ConnectionState::kActive) return;
    from = base;
  }
  const uint32_t end = base + 64;
  for (uint32_t psn = from; psn_lt(psn, end) && psn_lt(psn, highest_sacked_); ++psn) {
    judge_loss(rec(psn), thresh, now);
    if (state_ != ConnectionState::kActive) return;
  }
}

void Connection::judge_loss(TxRecord& r, uint32_t thresh, TimeNs now) {
  if (r.state != TxState::kInFlight) return;
  // Overtaken on its own path. With an adaptive policy, a path it stops
  // using carries no later packet to tell: there a packet is also lost once
  // one sent more than an RTT after it (its path's, if slower, plus twice
  // the variation) has been acknowledged, on any path.
  if (paths_.overtaken_by(r.entropy, r.path_seq) >= static_cast<int32_t>(thresh)) {
    mark_lost(r, LossKind::kInferred, now);
    return;
  }
  if (!paths_.adaptive() || rtt_.srtt() == 0) return;
  const TimeNs path_rtt = std::max<TimeNs>(rtt_.srtt(), paths_.stats(r.entropy).srtt_ns);
  if (latest_acked_sent_ > r.sent_at + path_rtt + 2 * rtt_.rttvar()) {
    mark_lost(r, LossKind::kInferred, now);
  }
}

void Connection::on_nack(const wire::ParsedPacket& pkt, TimeNs now) {
  const wire::NackHeader& n = pkt.nack;
  ++stats_.nacks_received;
  const uint32_t psn = n.nack_psn;
  if (psn_lt(psn, snd_una_) || !psn_lt(psn, snd_nxt_)) return;  // stale
  TxRecord& r = rec(psn);
  if (r.psn != psn) return;
  switch (static_cast<wire::NackCode>(n.nack_code)) {
    case wire::NackCode::kTrimmed:
    case wire::NackCode::kTrimmedLastHop:
    case wire::NackCode::kTrimmedAck:
      // The NACK echoes whether the trimmed copy was a retransmission, and
      // its entropy. One about the first copy of a packet resent since is
      // already repaired, and so is one about a retransmission on another
      // entropy than the latest copy's. (Guessing by the time since the
      // latest copy went out, as before, took genuine NACKs for old ones
      // whenever the data queue was fuller than the trimmed header's: an
      // incast's packets then waited for the backed-off RTO, and 127:1 took
      // 1.5x its ideal time.) Between copies on one entropy, or from a peer
      // that does not echo, a NACK is taken as about the latest: at worst
      // one spurious retransmission.
      if (!(n.pro.flags & wire::kAckFlagRetx) && r.tx_count > 1) break;
      if (r.tx_count > 2 && (n.payload & wire::kNackEchoesEntropy) &&
          static_cast<uint16_t>(n.payload) != paths_.entropy(r.entropy))
        break;
      mark_lost(r, LossKind::kTrimmed, now);
      break;
    case wire::NackCode::kNoPktBuf:
      ++stats_.rnr_nacks_received;
      // A NOP's (its part has gone again) or a READ response's: nothing to do.
      if (r.kind != TxKind::kRequest) break;
      if (n.vendor_code == static_cast<uint8_t>(wire::BraidNackReason::kQpNotReady)) [[unlikely]] {
        qp_not_ready(r, now);
        break;
      }
      // Receiver not ready: resend after the RNR delay (its queue pair's
      // requests wait); one episode counts once, against the request's own
      // count (IB's rnr_retry).
      if (QueuePair& q = qp_of(r); now >= q.hold_until()) {
        if (!q.rnr_try(r.seq, cfg_.rnr_retry_limit)) {
          stop_qp(r.qp, WcStatus::kRnrRetryExcErr);
          return;
        }
        // The responder's timer, from its NACK (IB's RNR NAK carries it),
        // at most InfiniBand's longest (655.36 ms); ours for a NACK that
        // names none.
        constexpr TimeNs kLongestRnrTimer = 655'360'000;
        q.hold(now + (n.payload != 0 ? std::min<TimeNs>(n.payload, kLongestRnrTimer)
                                     : cfg_.rnr_delay_ns));
        arm_hold(q.hold_until(), now);
      }
      if (r.state == TxState::kAcked) break;
      if (r.tx_count == 1 && qp_of(r).can_resend(r.seq)) {
        rnr_refill(r);
      } else if (r.state == TxState::kInFlight) {
        // Sent more than once: another copy may yet be taken, so the part
        // cannot go under a new PSN (it would be placed twice). It goes
        // again under this one after the wait.
        r.state = TxState::kLost;
        sub_inflight(charge(r));
        queue_retransmit(r);
      }
      break;
    case wire::NackCode::kExpNackErr:
      switch (static_cast<wire::BraidNackReason>(n.vendor_code)) {
        case wire::BraidNackReason::kRemoteAccess:
          if (r.kind == TxKind::kRequest) fail_request(r, WcStatus::kRemAccessErr);
          break;
        case wire::BraidNackReason::kRemoteOperation:
          if (r.kind == TxKind::kRequest) fail_request(r, WcStatus::kRemOpErr);
          break;
        case wire::BraidNackReason::kInvalidRequest:
          if (r.kind == TxKind::kRequest) {
            fail_request(r, WcStatus::kRemInvReqErr);
          } else if (r.kind == TxKind::kReadResponse) {
            stop_qp(r.qp, WcStatus::kWrFlushErr);  // our READ response was refused
          }
          break;
        default:
          break;
      }
      // Several queue pairs: the refused packet's PSN is filled (the PDC
      // goes on; the queue pair is in error).
      if (multi() && r.kind != TxKind::kNop && r.state != TxState::kAcked) nop_fill(r, false);
      break;
    default:
      break;
  }
}

}  // namespace braid

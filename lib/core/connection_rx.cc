// Connection, receive side: the job id, duplicate and window checks, the
// queue pair's placement of every packet (in any order) and its refusals,
// ACK scheduling, and the in-order work done when the cumulative point
// advances.
#include <algorithm>
#include <cstring>

#include "core/connection.h"

namespace braid {

void Connection::queue_nack(uint32_t psn, uint8_t code, uint8_t vendor, uint8_t flags,
                            uint32_t payload) {
  if (nack_count_ == sizeof(nacks_) / sizeof(nacks_[0])) return;  // the sender's RTO covers it
  nacks_[nack_count_++] = PendingNack{psn, code, vendor, flags, payload};
  ++stats_.nacks_sent;
}

bool Connection::open_sealed(wire::ParsedPacket* pkt, uint8_t* scratch, size_t scratch_size) {
  if (!cfg_.auth) {
    ++stats_.unsealed;
    return false;
  }
  if (pkt->sealed_len > scratch_size) [[unlikely]] {
    ++stats_.auth_failed;  // larger than any frame of ours: not the peer's
    return false;
  }
  const wire::TssHeader h = pkt->tss;
  if (!replay_.fresh(h.counter)) {
    ++stats_.auth_replayed;
    return false;
  }
  const uint8_t* at = pkt->sealed_at;
  const size_t len = pkt->sealed_len;
  size_t n = rx_key_->open(at, len, h, cfg_.remote_ip, cfg_.local_ip, scratch);
  if (rx_key_rtr_ != nullptr) {
    if (n > 0) {
      rx_key_rtr_.reset();  // the peer seals from the PSN it was given at RTS
    } else {
      // A responder that answered in RTR seals from our initial PSN on (its
      // ACKs too): a packet that authenticates so says it, and the key stays.
      n = rx_key_rtr_->open(at, len, h, cfg_.remote_ip, cfg_.local_ip, scratch);
      if (n > 0) rx_key_ = std::move(rx_key_rtr_);
    }
  }
  if (n == 0) {
    ++stats_.auth_failed;
    return false;
  }
  replay_.take(h.counter);
  if (wire::decode_udp_payload(scratch, n, false, pkt) != wire::DropReason::kNone) {
    ++stats_.invalid_requests;  // authentic, yet not a packet: a peer's bug
    return false;
  }
  pkt->sealed = true;
  pkt->tss = h;
  return true;
}

bool Connection::admits(const wire::ParsedPacket& pkt) {
  if (cfg_.auth && !pkt.sealed) [[unlikely]] {
    ++stats_.unsealed;
    return false;
  }
  // A peer that sends trailers sends them on every packet: one without is a
  // packet whose flag a bit error cleared (its trailer would be read as
  // payload), dropped like any corrupted one.
  if (pkt.crc_checked) {
    peer_crc_ = true;
  } else if (peer_crc_ && !pkt.trimmed) {
    ++stats_.missing_crc;
    return false;
  }
  return true;
}

void Connection::on_data_packet(const wire::ParsedPacket& pkt, TimeNs now) {
  if (!admits(pkt)) return;
  if (state_ == ConnectionState::kActive) {
    on_data(pkt, now);
  } else if (has_fatal_nack_) {
    if (pkt.req.psn == fatal_nack_.psn) {
      // The refused packet again: our NACK was lost. Say why once more.
      queue_nack(fatal_nack_.psn, fatal_nack_.code, fatal_nack_.vendor, fatal_nack_.flags);
    } else if (psn_le(pkt.req.psn, rx_.cack())) {
      // A packet we accepted before the error, again: our last ACK was
      // lost. Its request is done here; say so once more.
      ack_trigger_psn_ = rx_.cack();
      ack_trigger_at_ = now;
      ack_trigger_retx_ = true;
      ack_due_ = true;
    }
  }
  poke();
}

void Connection::on_packet(const wire::ParsedPacket& pkt, TimeNs now) {
  switch (static_cast<wire::PdsType>(pkt.pro.type)) {
    case wire::PdsType::kRudReq:
    case wire::PdsType::kRodReq:
    case wire::PdsType::kRudCcReq:
    case wire::PdsType::kRodCcReq:
      on_data_packet(pkt, now);  // (the endpoint calls it directly)
      return;
    case wire::PdsType::kAck:
    case wire::PdsType::kAckCc:
    case wire::PdsType::kAckCcx:
      on_ack_packet(pkt, now);  // (the endpoint calls it directly)
      return;
    default:
      break;
  }
  if (!admits(pkt)) return;
  switch (static_cast<wire::PdsType>(pkt.pro.type)) {
    case wire::PdsType::kNack:
    case wire::PdsType::kNackCcx:
      if (state_ == ConnectionState::kActive) on_nack(pkt, now);
      break;
    case wire::PdsType::kCtrl:
      // A CLOSE is answered in any state: the peer waits for the answer.
      if (pkt.ctrl.pro.next_hdr == static_cast<uint8_t>(wire::CtrlType::kBraidClose)) {
        on_close(pkt.ctrl.psn, now);
        break;
      }
      if (state_ != ConnectionState::kActive) break;
      switch (static_cast<wire::CtrlType>(pkt.ctrl.pro.next_hdr)) {
        case wire::CtrlType::kCnp:
          if (!names_sent_psn(pkt.ctrl.psn, kCtrlSlack)) {
            ++stats_.stale_ctrl;
            break;
          }
          ++stats_.cnps_received;
          peer_->cc().on_cnp(now);
          break;
        case wire::CtrlType::kCredit:
          if (!names_sent_psn(pkt.ctrl.psn, kCtrlSlack)) {
            ++stats_.stale_ctrl;
            break;
          }
          on_credit_ctrl(pkt, now);
          break;
        case wire::CtrlType::kCreditReq:
          if (!names_received_psn(pkt.ctrl.psn)) {
            ++stats_.stale_ctrl;
            break;
          }
          on_credit_ctrl(pkt, now);
          break;
        default:
          break;  // UET's other control packets: Braid sets PDCs up out of band
      }
      break;
    default:
      break;
  }
  poke();
}

void Connection::after_data_multi(const wire::ParsedPacket& pkt, uint16_t slot, uint32_t advanced) {
  // In-order work is only ever that of the queue pairs on receiving_.
  if (slot == kNoSlot) {  // a NO_OP for a queue pair no longer here
    if (advanced > 0 && !receiving_.empty()) in_order_multi();
    return;
  }
  QueuePair& q = *qps_[slot];
  if (pkt.has_ses_request) {
    q.count_request();
    if (q.in_order_pending()) receiving_.push(slot);
  }
  if (advanced > 0 && !receiving_.empty()) in_order_multi();
  if (pkt.has_ses_response) stop_qp(slot, q.complete_sends(snd_una_));
}

uint8_t Connection::nack_reason(Refusal why) {
  switch (why) {
    case Refusal::kAccess:
      return static_cast<uint8_t>(wire::BraidNackReason::kRemoteAccess);
    case Refusal::kRemoteOp:
      return static_cast<uint8_t>(wire::BraidNackReason::kRemoteOperation);
    default:
      return static_cast<uint8_t>(wire::BraidNackReason::kInvalidRequest);
  }
}

void Connection::refuse_multi(uint16_t slot, uint32_t psn, Refusal why) {
  // The refused queue pair ends alone (its receives flush) once what came
  // before the refusal is in; the sender fills the PSN with a NO_OP once
  // it hears.
  queue_nack(psn, static_cast<uint8_t>(wire::NackCode::kExpNackErr), nack_reason(why));
  if (slot == kNoSlot) return;  // a queue pair this connection no longer has
  QueuePair& q = *qps_[slot];
  if (q.state() != ConnectionState::kActive) return;
  q.refuse_from(psn);
  if (q.refusal_due(rx_.cack())) {
    stop_qp(slot, WcStatus::kWrFlushErr);
  } else {
    receiving_.push(slot);  // in_order_multi ends it
  }
}

bool Connection::may_place_other(const wire::ParsedPacket& pkt) {
  if (pkt.has_ses_request && pkt.ses.opcode == static_cast<uint8_t>(wire::SesOpcode::kNoOp)) {
    return true;
  }
  // For a queue pair in error: refused, so that its sender fails it and
  // fills the PSN (nothing of the PSN space waits for it).
  ++stats_.invalid_requests;
  return false;
}

bool Connection::names_received_psn(uint32_t psn) const {
  // The peer's last PSN sent: at most a window beyond what we hold in
  // order, at least what we hold (less reordering slack).
  const uint32_t cack = rx_.cack();
  return !psn_lt(psn + kCtrlSlack, cack) && psn_lt(psn, cack + 1 + rx_.window() + kCtrlSlack);
}

bool Connection::refused_here(const wire::ParsedPacket& pkt) {
  const uint32_t psn = pkt.req.psn;
  if (refused_for_rnr(psn, true) &&
      !(pkt.has_ses_request && pkt.ses.opcode == static_cast<uint8_t>(wire::SesOpcode::kNoOp))) {
    // Refused for a queue pair not here yet: only the NO_OP its sender
    // fills it with is taken (a copy of the request, even a retransmission
    // arriving once the queue pair is here, would be placed twice: the
    // sender sends the part again under a new PSN). Refused the same way.
    queue_nack(psn, static_cast<uint8_t>(wire::NackCode::kNoPktBuf),
               static_cast<uint8_t>(wire::BraidNackReason::kQpNotReady));
    ++stats_.duplicates;
    return true;
  }
  if (!(pkt.req.pro.flags & wire::kReqFlagRetx) && refused_for_rnr(psn)) {
    // A copy of a packet refused for want of a receive, as first sent (the
    // network duplicated it): its sender fills the PSN and sends the part
    // again, so this copy must not be taken (the part would be placed
    // twice). Only a retransmission (the NO_OP, or the packet resent under
    // its PSN) is.
    ++stats_.duplicates;
    return true;
  }
  return false;
}

bool Connection::take_for_no_qp(const wire::ParsedPacket& pkt, Refusal* why) {
  const uint32_t qpn = (uint32_t{pkt.ses.pid_on_fep} << 12) | pkt.ses.resource_index;
  if (pkt.ses.opcode == static_cast<uint8_t>(wire::SesOpcode::kNoOp)) {
    ++stats_.nops_received;
    return true;
  }
  if (removed_qpns_.contains(qpn)) {
    ++stats_.invalid_requests;
    *why = Refusal::kInvalid;
    return false;
  }
  // A queue pair not here yet (its peer reached RTS first): the sender
  // fills the PSN with a NO_OP and sends the part again after a wait.
  queue_nack(pkt.req.psn, static_cast<uint8_t>(wire::NackCode::kNoPktBuf),
             static_cast<uint8_t>(wire::BraidNackReason::kQpNotReady));
  set_refused_for_rnr(pkt.req.psn, true, true);
  ++stats_.rnr_nacks;
  *why = Refusal::kNone;
  return false;
}

void Connection::on_data(const wire::ParsedPacket& pkt, TimeNs now) {
  // The common packet, the short way: new data of this connection's job
  // for its one queue pair (a request, or a READ response once this end
  // has taken data), not CE-marked, nothing refused or paced on this
  // connection. Everything else, or a check failing here before anything
  // changed, goes the general way, which decides it all again; what this
  // way does is what the general one does for such a packet.
  const uint32_t psn = pkt.req.psn;
  // (The next PSN in order is always new.)
  const bool in_order = psn == rx_.cack() + 1;
  if (rx_general_ || pkt.trimmed || pkt.ip.ecn == wire::kEcnCe || grantor_.paced() ||
      (!in_order && rx_.check(psn) != ReceiveWindow::Verdict::kNew)) [[unlikely]] {
    on_data_general(pkt, now);
    return;
  }
  Refusal why = Refusal::kNone;
  if (pkt.has_ses_request) [[likely]] {
    if (pkt.ses.job_id != rx_job_id_ || !qp_.named_by(pkt.ses)) [[unlikely]] {
      on_data_general(pkt, now);
      return;
    }
    if (!qp_.place_request(pkt, rx_.cack(), &why)) [[unlikely]] {
      qp_.note_refusal(why);
      refuse(0, psn, why, now);
      return;
    }
  } else {
    // A READ response names the slot of its READ's queue pair: ours is 0.
    // The first data this end takes may start the PSN space (RTR-only
    // responders): the general way decides.
    if (!pkt.has_ses_response || pkt.resp.job_id != rx_job_id_ || pkt.resp.message_id != 0 ||
        stats_.data_received == 0) [[unlikely]] {
      on_data_general(pkt, now);
      return;
    }
    if (!qp_.place_read_response(pkt, &why)) [[unlikely]] {
      if (why != Refusal::kNone) refuse(0, psn, why, now);
      return;
    }
    read_progress_at_ = read_heard_at_ = now;
    read_retries_ = 0;
    qp_.note_read_heard(now);
  }
  const uint32_t advanced = rx_.mark(psn, in_order);
  ++stats_.data_received;
  rcvd_bytes_ += pkt.payload_len;
  ++unacked_packets_;
  if (!ack_trigger_ecn_) {
    ack_trigger_psn_ = psn;
    ack_trigger_at_ = now;
    ack_trigger_retx_ = pkt.req.pro.flags & wire::kReqFlagRetx;
  }
  if (advanced > 0) on_in_order_advance();
  if (pkt.has_ses_response) complete_sends();
  // (No refusal waits: only refuse() makes one, and it was not called.)
  if (state_ != ConnectionState::kActive) return;
  schedule_ack(!in_order || advanced > 1 || (pkt.req.pro.flags & wire::kReqFlagAckReq), now);
}

void Connection::refuse(uint16_t qp_slot, uint32_t psn, Refusal why, TimeNs now) {
  constexpr auto kErr = static_cast<uint8_t>(wire::NackCode::kExpNackErr);
  switch (why) {
    case Refusal::kNone:
      break;  // dropped silently (counted): nothing the sender can fix
    case Refusal::kNotReady:
      // The wait this responder asks for travels in the NACK (IB's RNR
      // NAK carries the responder's timer).
      queue_nack(psn, static_cast<uint8_t>(wire::NackCode::kNoPktBuf), 0, 0,
                 static_cast<uint32_t>(std::min<TimeNs>(cfg_.rnr_delay_ns, 0xffffffffu)));
      set_refused_for_rnr(psn, true);
      break;
    case Refusal::kAccess:
    case Refusal::kInvalid:
    case Refusal::kRemoteOp:
      if (multi() || cfg_.shared || qp_slot == kNoSlot) {
        go_multi();
        refuse_multi(qp_slot, psn, why);
        break;
      }
      // As an InfiniBand responder: the refused request ends the
      // connection here too. Nothing after it is placed, posted receives
      // flush, and the ACK owed for what came before still goes out.
      // Packets before it that are still on their way (other paths) are
      // placed and acknowledged first: the error waits for them.
      fatal_nack_ = PendingNack{psn, kErr, nack_reason(why), 0};
      has_fatal_nack_ = true;
      rx_general_ = true;
      queue_nack(psn, fatal_nack_.code, fatal_nack_.vendor);
      if (psn == rx_.cack() + 1) end_after_refusal(now);
      break;
  }
}

void Connection::on_data_general(const wire::ParsedPacket& pkt, TimeNs now) {
  const uint32_t psn = pkt.req.psn;
  if (stats_.data_received == 0 && pkt.has_ses_response && !pkt.trimmed) learn_responder_psn(pkt);
  // Before anything is counted or marked: data of this direction carries
  // its job id (a trimmed packet's SES header is not read: it only brings
  // a NACK for its PSN to the peer).
  uint16_t qp_slot = 0;
  if (!pkt.trimmed) [[likely]] {
    const uint32_t job = pkt.has_ses_request    ? pkt.ses.job_id
                         : pkt.has_ses_response ? pkt.resp.job_id
                                                : ~0u;  // no SES header: no job id
    if (job != rx_job_id_) [[unlikely]] {
      ++stats_.wrong_job_id;
      return;
    }
    // A request names its queue pair; a READ response the slot of the READ's.
    bool ours;
    if (!pkt.has_ses_request) {
      qp_slot = pkt.resp.message_id;
      ours = qp_slot < qps_.size();
    } else if (!multi()) [[likely]] {
      ours = qp_.named_by(pkt.ses);
    } else {
      // Queue pairs send in turns of packets: the last one found is
      // likely to be named again.
      const uint32_t qpn = (uint32_t{pkt.ses.pid_on_fep} << 12) | pkt.ses.resource_index;
      if (qpn == last_rx_qpn_) {
        ours = true;
        qp_slot = last_rx_slot_;
      } else {
        const auto it = slot_of_qpn_.find(qpn);
        ours = it != slot_of_qpn_.end();
        if (ours) {
          qp_slot = it->second;
          last_rx_qpn_ = qpn;
          last_rx_slot_ = qp_slot;
        }
      }
    }
    if (!ours) [[unlikely]] {
      ++stats_.wrong_qp;
      // With several queue pairs, a request for one this connection does
      // not have still takes its PSN: refused below (for one destroyed,
      // for good: its sender's queue pair alone ends; for one not here
      // yet, as RNR: it comes again), its sender fills the PSN with a
      // NO_OP, taken here. Dropped, it would stop the PSN space of all.
      if (!(multi() || cfg_.shared) || !pkt.has_ses_request) return;
      qp_slot = kNoSlot;
    }
  }
  const ReceiveWindow::Verdict v = rx_.check(psn);
  if (grantor_.paced()) {
    // What the receiver's link carried for this peer tells its pacer.
    const size_t ses = pkt.has_ses_response ? wire::kSesResponseDataSize : wire::kSesStandardSize;
    const auto frame = static_cast<uint32_t>(wire::kL2L4Size + wire::kRequestSize + ses +
                                             (pkt.trimmed ? cfg_.mtu : pkt.payload_len) +
                                             (pkt.sealed        ? wire::kTssOverhead
                                              : pkt.crc_checked ? wire::kCrcTrailerSize
                                                                : 0));
    if (pkt.req.pro.flags & wire::kReqFlagUnscheduled) {
      // Sent on a speculative allowance: it took the link's time that a
      // grant would have, so the next grant waits.
      if (!pkt.trimmed) {
        // The peer's other connections waiting for its turns are not
        // alone behind it (their grants would meet this data).
        grantor_.pacer()->on_unscheduled(grantor_.id(), frame, now,
                                         !own_peer_ && peer_->others_want_turns(this));
      }
    } else {
      if (pkt.trimmed || pkt.ip.ecn == wire::kEcnCe) {
        grantor_.pacer()->on_congestion(frame, pkt.trimmed, now);
      }
      if (v == ReceiveWindow::Verdict::kNew) grantor_.on_arrival(frame, credit_cap(), now);
    }
  }
  if (pkt.trimmed) {
    ++stats_.trimmed_received;
    if (v == ReceiveWindow::Verdict::kNew) {
      // Echo RETX and the copy's entropy: the sender can tell which copy of
      // the packet was trimmed.
      queue_nack(psn, static_cast<uint8_t>(wire::NackCode::kTrimmed), 0,
                 (pkt.req.pro.flags & wire::kReqFlagRetx) ? wire::kAckFlagRetx : 0,
                 wire::kNackEchoesEntropy | pkt.entropy);
      return;
    }
    // A trimmed copy of a packet we have: the sender needs our ACK, as for
    // any duplicate.
  }
  if (v == ReceiveWindow::Verdict::kOutOfWindow) {
    ++stats_.out_of_window;
    return;
  }
  if (has_fatal_nack_ && v == ReceiveWindow::Verdict::kNew && psn_le(fatal_nack_.psn, psn)) {
    // A refused request ends the connection once everything before it has
    // arrived; until then nothing from it on is placed (its NACK again for
    // a retransmission of it).
    if (psn == fatal_nack_.psn) queue_nack(psn, fatal_nack_.code, fatal_nack_.vendor);
    ++stats_.after_refusal;
    return;
  }
  if (v == ReceiveWindow::Verdict::kDuplicate) {
    // The ACK for it was lost or is late: say again what we have.
    ++stats_.duplicates;
    if (!ack_trigger_ecn_) {
      ack_trigger_psn_ = psn;
      ack_trigger_at_ = now;
      ack_trigger_retx_ = true;
    }
    ack_due_ = true;
    return;
  }
  if (!rnr_refused_.empty() && refused_here(pkt)) [[unlikely]] {
    return;
  }
  Refusal why = Refusal::kNone;
  bool ok = false;
  if (qp_slot == kNoSlot) [[unlikely]] {
    ok = take_for_no_qp(pkt, &why);
    if (!ok && why == Refusal::kNone) return;  // answered there
  } else if (QueuePair& q = qp_slot == 0 ? qp_ : *qps_[qp_slot]; multi() && !may_place(q, pkt))
      [[unlikely]] {
    why = Refusal::kInvalid;
  } else if (pkt.has_ses_request) {
    ok = q.place_request(pkt, rx_.cack(), &why);
    if (!ok) q.note_refusal(why);  // (a READ response refused is the requester's completion)
  } else if (pkt.has_ses_response) {
    ok = q.place_read_response(pkt, &why);
  } else {
    ++stats_.invalid_requests;
  }
  if (!ok) {
    if (why != Refusal::kNone) refuse(qp_slot, psn, why, now);
    return;
  }
  if (pkt.has_ses_response) {
    read_progress_at_ = read_heard_at_ = now;
    read_retries_ = 0;
    qps_[qp_slot]->note_read_heard(now);
  }
  // The ACK names one packet. A CE-marked one keeps the name until the ACK
  // goes out, so the mark is charged to its entropy, not a later packet's.
  // A second marked packet before then: the ACK naming the first is built
  // now (without this packet in it), to go out first.
  const bool ce = pkt.ip.ecn == wire::kEcnCe;
  if (ce) ++stats_.ecn_received;
  if (ce && ack_trigger_ecn_ && unacked_packets_ > 0 && ce_ack_count_ < kCeAcks) {
    if (!ce_acks_) ce_acks_ = std::make_unique<CeAcks>();
    const uint32_t slot = (ce_ack_head_ + ce_ack_count_) % kCeAcks;
    const uint32_t n = build_ack(ce_acks_->frame[slot], kCeAckBytes, now);
    if (n > 0) {
      ce_acks_->len[slot] = static_cast<uint8_t>(n);
      ++ce_ack_count_;
    }
  }
  if (!rnr_refused_.empty()) [[unlikely]] {
    set_refused_for_rnr(psn, false);
    set_refused_for_rnr(psn, false, true);
  }
  const bool in_order = psn == rx_.cack() + 1;
  const uint32_t advanced = rx_.mark(psn);
  ++stats_.data_received;
  rcvd_bytes_ += pkt.payload_len;
  ++unacked_packets_;
  if (ce || !ack_trigger_ecn_) {
    ack_trigger_psn_ = psn;
    ack_trigger_at_ = now;
    ack_trigger_retx_ = pkt.req.pro.flags & wire::kReqFlagRetx;
  }
  if (ce) ack_trigger_ecn_ = true;
  // The notification point: a CNP for CE, at most one per interval, whatever
  // this end's own algorithm (the sender's may be DCQCN; others ignore it).
  // One point for the peer's connections: its reaction point is shared too.
  if (ce && peer_->cnp_due(now, cfg_.cc.dcqcn.cnp_interval_ns)) cnp_due_ = true;
  if (multi()) [[unlikely]] {
    after_data_multi(pkt, qp_slot, advanced);
  } else {
    if (advanced > 0) on_in_order_advance();
    if (pkt.has_ses_response) complete_sends();
  }
  if (state_ != ConnectionState::kActive) return;
  if (has_fatal_nack_ && rx_.cack() + 1 == fatal_nack_.psn && !error_after_reads_) {
    end_after_refusal(now);  // everything before the refusal is in: ACKed now
    return;
  }
  // A packet that closes a gap is acknowledged at once: what it completes
  // (often a message whose short last packet overtook it) waits for no timer.
  schedule_ack(!in_order || advanced > 1 || ce || (pkt.req.pro.flags & wire::kReqFlagAckReq), now);
}

// An InfiniBand responder answers READs in RTR, before (or without) RTS,
// the only transition that gives Braid's responder the send PSN its peer
// expects (perftest's ib_read_bw server never leaves RTR). Such a responder
// sends nothing before its first READ response, so while this side has
// accepted nothing, the first packet of the response to its first READ,
// arriving outside the window it would otherwise be refused from, names
// where the responder's PSNs start. A packet of it that arrives before that
// one is refused and comes back with the retransmission.
void Connection::learn_responder_psn(const wire::ParsedPacket& pkt) {
  // Inside the window, the responder's PSNs are the ones expected (it may
  // have sent requests before, some still on their way). Outside, only a
  // responder that answered in RTR: it knows no send PSN there and starts
  // its responses at ours (our initial PSN, its rq_psn), which a stranger
  // must guess as exactly as RoCEv2's (any PSN used to restart the window:
  // one forged frame completed a READ with its bytes).
  const uint32_t job_id = job_id_for(false, cfg_.tx_psn);  // the peer's, started at our PSN
  if (pkt.resp.message_offset != 0 || pkt.req.psn != cfg_.tx_psn || pkt.resp.job_id != job_id ||
      rx_.check(pkt.req.psn) == ReceiveWindow::Verdict::kNew) {
    return;
  }
  // Only the first READ's response starts the PSN space.
  uint16_t first = 0;
  if (qp_.first_read(&first) && first == pkt.resp.read_request_message_id) {
    rx_.restart(pkt.req.psn);
    rx_job_id_ = job_id;
  }
}

void Connection::release_read_responses() {
  qp_.release_read_responses(snd_una_, rx_.cack());
  if (error_after_reads_ && !qp_.reads_pending()) {
    set_error(WcStatus::kWrFlushErr);  // the READs before the refusal are answered
  }
}

void Connection::end_after_refusal(TimeNs now) {
  // As an InfiniBand responder, which answers the READs it accepted before
  // the request it refuses: those responses go first (and are
  // acknowledged), then the connection ends.
  if (!qp_.reads_pending()) {
    set_error(WcStatus::kWrFlushErr);
    return;
  }
  error_after_reads_ = true;
  schedule_ack(true, now);  // what came before the refusal is acknowledged now
}

}  // namespace braid

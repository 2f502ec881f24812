#include "core/endpoint.h"

#include "wire/byte_order.h"

#include <algorithm>
#include <cstring>

namespace braid {

Endpoint::Endpoint(const EndpointConfig& cfg)
    : cfg_(cfg),
      memory_(cfg.shared_memory != nullptr ? cfg.shared_memory : &mrs_),
      wheel_(cfg.timer_tick_ns, 4096),
      pacer_(cfg.credit, &wheel_, &Endpoint::grant_thunk, this) {
  decode_.udp_port = cfg.udp_port;
  // A trailer is checked wherever a packet carries one; peers that send
  // none are not refused (each sender chooses).
  decode_.crc_trailer = false;
  decode_.trim_dscp = cfg.trim_dscp;
  // Sealed packets are opened here: room for any UDP payload.
  if (cfg.auth != AuthMode::kOff) open_buf_.resize(65536);
}

Endpoint::~Endpoint() {
  for (auto& r : closing_) {
    if (r != nullptr) wheel_.cancel(&r->timer);
  }
}

uint32_t Endpoint::grant_thunk(void* owner, uint16_t id, uint32_t max_bytes, bool* more,
                               TimeNs now) {
  auto* ep = static_cast<Endpoint*>(owner);
  *more = false;
  if (ep->cfg_.cc_per_peer) {
    // The turn is a peer's: it passes it to its connections in turn.
    PeerCongestion* p = id < ep->turn_owner_.size() ? ep->turn_owner_[id] : nullptr;
    return p == nullptr ? 0 : p->take_turn(max_bytes, more, now);
  }
  Connection* c = ep->connection(id);
  return c == nullptr ? 0 : c->grant_credit(max_bytes, more, now);
}

Connection* Endpoint::create_connection(ConnectionConfig cfg, CompletionQueue* send_cq,
                                        CompletionQueue* recv_cq) {
  if (connection(cfg.local_id) != nullptr || aliases_.contains(cfg.local_id)) return nullptr;
  erase_closing(cfg.local_id);  // the id's last user waits no longer
  cfg.local_mac = cfg_.mac;
  cfg.local_ip = cfg_.ip;
  cfg.udp_port = cfg_.udp_port;
  cfg.crc_trailer = cfg_.crc_trailer;
  cfg.trim_dscp = cfg_.trim_dscp;
  cfg.auth = cfg_.auth != AuthMode::kOff;
  cfg.auth_secret = cfg_.auth_secret;
  cfg.auth_sdi = cfg_.auth_sdi;
  if (conns_.size() <= cfg.local_id) conns_.resize(size_t{cfg.local_id} + 1);
  control_.reserve_ids(conns_.size());
  data_.reserve_ids(conns_.size());
  pacer_.reserve_ids(std::max(conns_.size(), turn_owner_.size()));
  Connection* c = (conns_[cfg.local_id] = std::make_unique<Connection>(
                       cfg, memory_, send_cq, recv_cq, &wheel_, peer_for(cfg)))
                      .get();
  if (c->auth_broken()) {
    destroy_connection(cfg.local_id);
    return nullptr;
  }
  c->set_ack_asked(&ack_asked_);
  c->set_ready_queues(&control_, &data_);
  c->set_credit_pacer(&pacer_);
  if (cfg.shared) aliases_[cfg.local_id] = Alias{cfg.local_id, cfg.remote_id};
  return c;
}

uint16_t Endpoint::attach_queue_pair(uint16_t local_id, QpConfig q, CompletionQueue* send_cq,
                                     CompletionQueue* recv_cq) {
  Connection* c = connection(local_id);
  if (c == nullptr || !c->shared() || q.qp_num == 0 || q.qp_num > 0xffff || q.remote_qpn > 0xffff) {
    return Connection::kNoSlot;
  }
  const auto id = static_cast<uint16_t>(q.qp_num);
  if (connection(id) != nullptr || aliases_.contains(id)) return Connection::kNoSlot;
  const uint16_t slot = c->add_queue_pair(q, send_cq, recv_cq);
  if (slot != Connection::kNoSlot)
    aliases_[id] = Alias{local_id, static_cast<uint16_t>(q.remote_qpn)};
  return slot;
}

Endpoint::Detach Endpoint::detach_queue_pair(uint16_t local_id, uint16_t slot) {
  Connection* c = connection(local_id);
  if (c == nullptr || slot >= c->queue_pair_slots()) return Detach::kRefused;
  const auto id = static_cast<uint16_t>(c->queue_pair(slot).config().qp_num);
  if (!c->remove_queue_pair(slot)) return Detach::kRefused;
  // The peer names the number it learnt from our first data (or, before,
  // any of them): those stay.
  if (id == local_id || !c->peer_named() || id == c->peer_wire_remote() || id == c->wire_id()) {
    return Detach::kNumberHeld;
  }
  aliases_.erase(id);
  return Detach::kNumberFree;
}

Connection* Endpoint::by_alias(uint16_t dst, uint16_t src) const {
  const auto it = aliases_.find(dst);
  if (it == aliases_.end() || it->second.remote != src) return nullptr;
  Connection* c = connection(it->second.conn);
  return c != nullptr && c->config().remote_ip == pkt_.ip.src ? c : nullptr;
}

PeerCongestion* Endpoint::peer_for(const ConnectionConfig& cfg) {
  if (!cfg_.cc_per_peer) return nullptr;  // the connection's own
  // As the connection will clamp it.
  const uint32_t packet = std::clamp<uint32_t>(cfg.mtu, 64, 16384 - 1) + Connection::kPacketCharge;
  for (Peer& p : peers_) {
    if (p.ip == cfg.remote_ip && p.cc->fits(cfg.cc, packet)) return p.cc.get();
  }
  peers_.push_back(Peer{cfg.remote_ip, std::make_unique<PeerCongestion>(cfg.cc, packet, &wheel_)});
  PeerCongestion* p = peers_.back().cc.get();
  // The lowest free turn id (control path: a linear look is fine).
  const auto free = std::find(turn_owner_.begin(), turn_owner_.end(), nullptr);
  const auto id = static_cast<uint16_t>(free - turn_owner_.begin());
  if (free == turn_owner_.end()) turn_owner_.push_back(nullptr);
  turn_owner_[id] = p;
  p->set_turn_id(id);
  pacer_.reserve_ids(std::max(conns_.size(), turn_owner_.size()));
  return p;
}

void Endpoint::destroy_connection(uint16_t local_id) {
  Connection* c = connection(local_id);
  if (c == nullptr) return;
  const PeerCongestion* shared = &c->peer();
  if (c->shared())
    std::erase_if(aliases_, [&](const auto& a) { return a.second.conn == local_id; });
  conns_[local_id].reset();
  control_.remove(local_id);
  data_.remove(local_id);
  if (!cfg_.cc_per_peer) pacer_.remove(local_id);
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].cc.get() != shared) continue;
    if (peers_[i].cc->members() == 0) {
      const uint16_t turn = peers_[i].cc->turn_id();
      pacer_.remove(turn);
      turn_owner_[turn] = nullptr;
      peers_[i] = std::move(peers_.back());
      peers_.pop_back();
    } else {
      peers_[i].cc->wake_if_open();  // what it had in flight is the others' now
    }
    break;
  }
}

void Endpoint::close_connection(uint16_t local_id) {
  Connection* c = connection(local_id);
  if (c == nullptr) return;
  if (c->peer_may_wait() && cfg_.close_sends > 0) {
    auto r = std::make_unique<Closing>();
    if (cfg_.auth != AuthMode::kOff) c->give_keys(&r->tx_key, &r->rx_key, &r->replay);
    r->close_len = c->build_close(r->close.data(), static_cast<uint32_t>(r->close.size()));
    r->answer_len = c->build_close_answer(r->answer_frame.data(),
                                          static_cast<uint32_t>(r->answer_frame.size()));
    if (r->close_len > 0 && r->answer_len > 0) {
      r->timer.fn = &Endpoint::closing_timer;
      r->timer.owner = r.get();
      r->endpoint = this;
      // Kept under the id the peer names, from the id it names as its own
      // (a shared PDC's are those of its queue pairs: Connection::shared).
      r->local_id = c->peer_wire_remote();
      r->remote_id = c->peer_wire_id();
      r->dst_pdc = c->wire_remote();
      r->remote_ip = c->config().remote_ip;
      r->sends_left = std::min<uint8_t>(cfg_.close_sends, kMaxCloseSends);
      r->interval = cfg_.close_retry_ns;
      // Each send on another of the connection's entropies: one dead path
      // must not take every copy.
      const PathSet& paths = c->paths();
      r->nports = static_cast<uint8_t>(std::min<size_t>(paths.count(), r->ports.size()));
      for (uint8_t i = 0; i < r->nports; ++i) r->ports[i] = paths.entropy(i);
      const uint16_t key = r->local_id;
      erase_closing(key);
      if (closing_.size() <= key) closing_.resize(size_t{key} + 1);
      Closing& kept = *(closing_[key] = std::move(r));
      ++closing_count_;
      kept.timer_due = true;  // the first CLOSE leaves with the next transmit
      queue_closing(kept);
    }
  }
  destroy_connection(local_id);
}

void Endpoint::closing_timer(Timer* t, TimeNs) {
  Closing& r = *static_cast<Closing*>(t->owner);
  Endpoint& e = *r.endpoint;
  if (r.sends_left == 0) {
    // Unanswered after its last send's interval. (advance() does not touch
    // a timer once its callback has run: the record may go.)
    ++e.stats_.closes_unanswered;
    e.erase_closing(r.local_id);
    return;
  }
  r.timer_due = true;
  e.queue_closing(r);
}

void Endpoint::queue_closing(Closing& r) {
  if (r.queued) return;
  r.queued = true;
  closing_due_.push_back(r.local_id);
}

void Endpoint::erase_closing(uint16_t id) {
  if (id >= closing_.size() || closing_[id] == nullptr) return;
  wheel_.cancel(&closing_[id]->timer);
  closing_[id].reset();
  --closing_count_;
}

// A packet for a connection that is gone: true when a closing record of
// that connection took it.
bool Endpoint::on_closing_packet(uint16_t dst, uint16_t src) {
  if (dst >= closing_.size() || closing_[dst] == nullptr) return false;
  Closing& r = *closing_[dst];
  if (r.remote_id != src || r.remote_ip != pkt_.ip.src) return false;
  if (cfg_.auth != AuthMode::kOff || pkt_.sealed) {
    // Only what the peer sealed counts (the record has its keys).
    const wire::TssHeader& h = pkt_.tss;
    if (!pkt_.sealed || r.rx_key == nullptr || pkt_.sealed_len > open_buf_.size() ||
        !r.replay.fresh(h.counter) ||
        r.rx_key->open(pkt_.sealed_at, pkt_.sealed_len, h, r.remote_ip, cfg_.ip,
                       open_buf_.data()) == 0) {
      return true;  // dropped: not the peer's
    }
    r.replay.take(h.counter);
  }
  switch (static_cast<wire::PdsType>(pkt_.pro.type)) {
    case wire::PdsType::kAck:
    case wire::PdsType::kAckCc:
    case wire::PdsType::kAckCcx:
      // Only the answer to a CLOSE says the peer has our cumulative PSN: a
      // plain ACK may have left before our CLOSE arrived.
      if (!(pkt_.ack.pro.flags & wire::kAckFlagProbe)) return true;
      ++stats_.closes_answered;
      erase_closing(dst);
      return true;
    case wire::PdsType::kCtrl:
      if (pkt_.ctrl.pro.next_hdr != static_cast<uint8_t>(wire::CtrlType::kBraidClose)) return true;
      // The peer closes as well: it waits for nothing of ours. Its own
      // record waits for an answer: one goes, then this record.
      ++stats_.closes_answered;
      r.answer = true;
      queue_closing(r);
      return true;
    case wire::PdsType::kNack:
    case wire::PdsType::kNackCcx:
      return true;
    default:
      // Data again: our ACK did not reach the peer. The CLOSE says it, at
      // once and outside the retry budget (the peer's retransmissions are
      // paced by its own timer).
      queue_closing(r);
      return true;
  }
}

// The answer to a CLOSE for a connection this end does not have (never
// had, or closed without a record: it waits for nothing from the peer).
void Endpoint::answer_unknown_close(TimeNs now) {
  if (now >= stateless_refill_at_) {
    const TimeNs periods = (now - stateless_refill_at_) / kStatelessIntervalNs + 1;
    stateless_tokens_ =
        static_cast<uint32_t>(std::min<TimeNs>(kMaxStateless, stateless_tokens_ + periods));
    stateless_refill_at_ = now + kStatelessIntervalNs;
  }
  if (stateless_tokens_ == 0 || stateless_.size() >= kMaxStateless) {
    ++stats_.stateless_limited;  // the peer's retries come back
    return;
  }
  --stateless_tokens_;
  Stateless& a = stateless_.emplace_back();
  wire::AckHeader h;
  h.pro.type = static_cast<uint8_t>(wire::PdsType::kAckCc);
  h.pro.flags = wire::kAckFlagProbe;
  h.cack_psn = pkt_.ctrl.psn;
  h.spdcid = pkt_.ctrl.dpdcid;
  h.dpdcid = pkt_.ctrl.spdcid;
  h.cc_type = static_cast<uint8_t>(wire::CcType::kNscc);
  wire::encode_ack(a.frame.data() + wire::kL2L4Size, h);
  const wire::FrameTemplate t(cfg_.mac, pkt_.src_mac, cfg_.ip, pkt_.ip.src, cfg_.udp_port);
  t.write(a.frame.data(), pkt_.entropy, static_cast<uint32_t>(wire::kAckCcSize),
          static_cast<uint8_t>(wire::kDscpAck << 2));
  a.len = static_cast<uint32_t>(wire::kL2L4Size + wire::kAckCcSize);
  a.dst_ip = pkt_.ip.src;
  a.dst_pdc = pkt_.ctrl.spdcid;
}

uint32_t Endpoint::put_closing_frame(const Closing& r, const uint8_t* frame, uint32_t len,
                                     uint8_t* buf) {
  std::memcpy(buf, frame, len);
  if (r.tx_key != nullptr) {
    // The frame has its final lengths and room for the seal: the body is
    // what lies between the UDP header and that room.
    r.tx_key->seal(buf + wire::kL2L4Size, len - wire::kL2L4Size - wire::kTssOverhead, cfg_.ip,
                   r.remote_ip);
  }
  return len;
}

uint32_t Endpoint::transmit_closing(TxOut& out, TimeNs now) {
  uint8_t* const buf = out.buf;
  const uint32_t cap = out.cap;
  if (!stateless_.empty()) {
    const Stateless& a = stateless_.back();
    if (cap < a.len) return 0;
    std::memcpy(buf, a.frame.data(), a.len);
    const uint32_t len = a.len;
    out.dst_ip = a.dst_ip;
    out.dst_pdc = a.dst_pdc;
    stateless_.pop_back();
    ++stats_.tx_frames;
    return len;
  }
  while (!closing_due_.empty()) {
    const uint16_t id = closing_due_.back();
    Closing* r = id < closing_.size() ? closing_[id].get() : nullptr;
    if (r == nullptr || !r->queued) {
      closing_due_.pop_back();  // stale: the record went
      continue;
    }
    const bool answer = r->answer;
    const uint32_t len = answer ? r->answer_len : r->close_len;
    if (cap < len) return 0;
    closing_due_.pop_back();
    r->queued = false;
    ++stats_.tx_frames;
    out.dst_ip = r->remote_ip;
    out.dst_pdc = r->dst_pdc;
    if (answer) {
      put_closing_frame(*r, r->answer_frame.data(), len, buf);
      erase_closing(id);
      return len;
    }
    put_closing_frame(*r, r->close.data(), len, buf);
    if (r->nports > 0) {
      wire::store_be16(buf + wire::kEthernetSize + wire::kIpv4Size,
                       r->ports[r->next_port++ % r->nports]);
    }
    ++stats_.closes_sent;
    if (r->timer_due) {
      r->timer_due = false;
      --r->sends_left;
      wheel_.schedule(&r->timer, now + r->interval);
      r->interval *= 2;
    }
    return len;
  }
  return 0;
}

void Endpoint::receive(const uint8_t* frame, uint32_t len, TimeNs now) {
  ++stats_.rx_frames;
  const wire::DropReason r = wire::decode_frame(frame, len, decode_, &pkt_);
  if (r != wire::DropReason::kNone) {
    drop(r);
    return;
  }
  if (pkt_.ip.dst != cfg_.ip || std::memcmp(pkt_.dst_mac.data(), cfg_.mac.data(), 6) != 0) {
    drop(wire::DropReason::kNotForUs);
    return;
  }
  uint16_t dst = 0, src = 0;
  bool close = false, ack = false;
  // What decodes and is not an ACK, NACK or control packet is a request
  // (data): tested first, as one bit of a mask.
  const bool data = wire::is_request_type(pkt_.pro.type);
  if (data) [[likely]] {
    if (pkt_.req.pro.flags & wire::kReqFlagSyn) {
      drop(wire::DropReason::kUnknownConnection);  // Braid sets PDCs up out of band
      return;
    }
    dst = pkt_.req.dpdcid;
    src = pkt_.req.spdcid;
  } else {
    switch (static_cast<wire::PdsType>(pkt_.pro.type)) {
      case wire::PdsType::kAck:
      case wire::PdsType::kAckCc:
      case wire::PdsType::kAckCcx:
        dst = pkt_.ack.dpdcid;
        src = pkt_.ack.spdcid;
        ack = true;
        break;
      case wire::PdsType::kNack:
      case wire::PdsType::kNackCcx:
        dst = pkt_.nack.dpdcid;
        src = pkt_.nack.spdcid;
        break;
      case wire::PdsType::kCtrl:
        dst = pkt_.ctrl.dpdcid;
        src = pkt_.ctrl.spdcid;
        close = pkt_.ctrl.pro.next_hdr == static_cast<uint8_t>(wire::CtrlType::kBraidClose);
        break;
      case wire::PdsType::kUudReq:
        on_datagram(frame);  // a datagram: no connection (off the data path's way)
        return;
      default:
        drop(wire::DropReason::kUnknownPdsType);  // (the decoder takes no other)
        return;
    }
  }
  Connection* c = connection(dst);
  // (A shared PDC's own pair is its key's alias: it takes this path once
  // it has learnt the peer's names.)
  if (c == nullptr || c->named_src() != src || c->config().remote_ip != pkt_.ip.src) [[unlikely]] {
    c = route_other(c, dst, src, close, data, now);
    if (c == nullptr) return;  // dropped or answered there
  }
  if (pkt_.sealed && !c->open_sealed(&pkt_, open_buf_.data(), open_buf_.size())) {
    return;  // counted there
  }
  if (close && !c->names_sent_psn(pkt_.ctrl.psn, 0)) [[unlikely]] {
    // From an earlier connection on these ids, or a stranger guessing: as
    // for an unknown id (a connection's own answer would tell its PSNs).
    c->note_stale_close();
    if (cfg_.auth != AuthMode::kRequired) answer_unknown_close(now);
    return;
  }
  if (data) {
    c->on_data_packet(pkt_, now);
  } else if (ack) {
    c->on_ack_packet(pkt_, now);
  } else {
    c->on_packet(pkt_, now);
  }
}

Connection* Endpoint::route_other(Connection* c, uint16_t dst, uint16_t src, bool close, bool data,
                                  TimeNs now) {
  if (Connection* a = aliases_.empty() ? nullptr : by_alias(dst, src)) {
    // A shared PDC: its peer's first data says which of its queue pairs
    // the peer names, and so where the peer's PSNs start.
    if (data && !a->peer_named() && !pkt_.sealed && !a->learn_peer_names(pkt_, dst, src)) {
      drop(wire::DropReason::kUnknownConnection);
      return nullptr;
    }
    return a;
  }
  if (c != nullptr && c->shared()) c = nullptr;  // (not from a pair of its own)
  if (closing_count_ > 0 && c == nullptr && on_closing_packet(dst, src)) return nullptr;
  if (pkt_.sealed) {
    ++stats_.sealed_strangers;  // nothing to open it with
    drop(wire::DropReason::kUnknownConnection);
    return nullptr;
  }
  // A CLOSE for an id we do not have, or from someone else than its peer,
  // is answered the same way: which ids are live does not show.
  if (close && cfg_.auth != AuthMode::kRequired) {
    if (c == nullptr) ++stats_.closes_answered_unknown;
    if (c != nullptr) c->note_stale_close();
    answer_unknown_close(now);
    return nullptr;
  }
  drop(wire::DropReason::kUnknownConnection);
  return nullptr;
}

bool Endpoint::wants_to_send() {
  // A queued connection may have lost what it had (its window closed, an
  // error): those at the front are dropped here; each queues itself again
  // when it has something.
  while (!control_.empty() && !conns_[control_.front()]->control_due()) control_.pop();
  if (!control_.empty() || !closing_due_.empty() || !stateless_.empty() ||
      !datagram_ready_.empty()) {
    return true;
  }
  while (!data_.empty() && !conns_[data_.front()]->data_ready()) {
    conns_[data_.front()]->park();
    data_.pop();
  }
  return !data_.empty();
}

DatagramQueuePair* Endpoint::create_datagram_qp(DatagramConfig cfg, CompletionQueue* send_cq,
                                                CompletionQueue* recv_cq) {
  if (datagrams_.count(cfg.qp_num) != 0) return nullptr;
  cfg.local_mac = cfg_.mac;
  cfg.local_ip = cfg_.ip;
  cfg.udp_port = cfg_.udp_port;
  cfg.crc_trailer = cfg_.crc_trailer;
  auto q = std::make_unique<DatagramQueuePair>(cfg, send_cq, recv_cq);
  DatagramQueuePair* p = q.get();
  datagrams_.emplace(cfg.qp_num, std::move(q));
  return p;
}

void Endpoint::destroy_datagram_qp(uint32_t qp_num) {
  datagrams_.erase(qp_num);
  std::erase(datagram_ready_, qp_num);
}

void Endpoint::datagram_posted(uint32_t qp_num) {
  if (std::find(datagram_ready_.begin(), datagram_ready_.end(), qp_num) == datagram_ready_.end()) {
    datagram_ready_.push_back(qp_num);
  }
}

void Endpoint::on_datagram(const uint8_t* frame) {
  // Datagrams travel in clear: a device that authenticates takes none.
  DatagramQueuePair* q = nullptr;
  if (cfg_.auth == AuthMode::kOff && pkt_.has_ses_request) {
    q = datagram_qp((uint32_t{pkt_.ses.pid_on_fep} << 12) | pkt_.ses.resource_index);
  }
  if (q == nullptr) {
    drop(wire::DropReason::kUnknownDatagramQp);
    return;
  }
  q->on_packet(pkt_, frame + wire::kEthernetSize);
}

uint32_t Endpoint::transmit_datagram(TxOut& out) {
  while (!datagram_ready_.empty()) {
    const uint32_t qpn = datagram_ready_.front();
    DatagramQueuePair* q = datagram_qp(qpn);
    const uint32_t len = q != nullptr ? q->produce(out) : 0;
    if (q == nullptr || !q->has_pending()) {
      datagram_ready_.erase(datagram_ready_.begin());
    } else if (datagram_ready_.size() > 1) {
      // One datagram per turn: the next QP's goes next.
      datagram_ready_.erase(datagram_ready_.begin());
      datagram_ready_.push_back(qpn);
    }
    if (len > 0) {
      ++stats_.tx_frames;
      return len;
    }
    if (q != nullptr && q->has_pending()) return 0;  // no room in this buffer
  }
  return 0;
}

uint32_t Endpoint::transmit(TxOut& out, TimeNs now) {
  out.payload_len = 0;
  // Control frames first: an ACK held behind another connection's data
  // delays the peer's window and its loss detection.
  for (size_t n = control_.size(); n > 0; --n) {
    const uint16_t id = control_.front();
    Connection& c = *conns_[id];
    const uint32_t len = c.produce_control(out.buf, out.cap, now);
    control_.pop();
    if (c.control_due()) control_.push(id);  // more (NACKs, hole ACKs), or no room
    if (len > 0) {
      ++stats_.tx_frames;
      out.dst_ip = c.config().remote_ip;
      out.dst_pdc = c.wire_remote();
      return len;
    }
  }
  if (!closing_due_.empty() || !stateless_.empty()) {
    const uint32_t len = transmit_closing(out, now);
    if (len > 0) return len;
  }
  if (!datagram_ready_.empty()) [[unlikely]] {
    const uint32_t len = transmit_datagram(out);
    if (len > 0) return len;
  }
  // Then data, up to data_quantum frames per connection in turn. One that
  // used its turn stays queued, behind the others: whether it has more is
  // found out on its next turn (a turn that finds nothing takes it out; it
  // queues itself again when that changes: a window opening, a timer).
  for (size_t n = data_.size(); n > 0; --n) {
    const uint16_t id = data_.front();
    if (id != data_run_id_) {
      data_run_id_ = id;
      data_run_ = 0;
    }
    Connection& c = *conns_[id];
    const uint32_t len = c.produce_data_frame(out, now);
    if (len > 0) {
      out.dst_ip = c.config().remote_ip;
      out.dst_pdc = c.wire_remote();
      if (++data_run_ >= cfg_.data_quantum && data_.size() > 1) {
        data_.pop();
        data_.push(id);
        data_run_ = 0;
      }
      ++stats_.tx_frames;
      return len;
    }
    c.park();
    data_.pop();
    data_run_ = 0;
  }
  return 0;
}

}  // namespace braid

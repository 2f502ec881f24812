#include "core/endpoint.h"

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
}

Endpoint::~Endpoint() = default;

uint32_t Endpoint::grant_thunk(void* owner, uint16_t id, uint32_t max_bytes, bool* more, TimeNs) {
  Connection* c = static_cast<Endpoint*>(owner)->connection(id);
  *more = false;
  return c == nullptr ? 0 : c->grant_credit(max_bytes, more);
}

Connection* Endpoint::create_connection(ConnectionConfig cfg, CompletionQueue* send_cq,
                                        CompletionQueue* recv_cq) {
  if (connection(cfg.local_id) != nullptr) return nullptr;
  cfg.local_mac = cfg_.mac;
  cfg.local_ip = cfg_.ip;
  cfg.udp_port = cfg_.udp_port;
  cfg.crc_trailer = cfg_.crc_trailer;
  cfg.trim_dscp = cfg_.trim_dscp;
  if (conns_.size() <= cfg.local_id) conns_.resize(size_t{cfg.local_id} + 1);
  control_.reserve_ids(conns_.size());
  data_.reserve_ids(conns_.size());
  pacer_.reserve_ids(conns_.size());
  Connection* c =
      (conns_[cfg.local_id] = std::make_unique<Connection>(cfg, memory_, send_cq, recv_cq, &wheel_))
          .get();
  c->set_immediate_ack_counter(&stats_.immediate_acks);
  c->set_ready_queues(&control_, &data_);
  c->set_credit_pacer(&pacer_);
  return c;
}

void Endpoint::destroy_connection(uint16_t local_id) {
  if (connection(local_id) == nullptr) return;
  conns_[local_id].reset();
  control_.remove(local_id);
  data_.remove(local_id);
  pacer_.remove(local_id);
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
  switch (static_cast<wire::PdsType>(pkt_.pro.type)) {
    case wire::PdsType::kAck:
    case wire::PdsType::kAckCc:
    case wire::PdsType::kAckCcx:
      dst = pkt_.ack.dpdcid;
      src = pkt_.ack.spdcid;
      break;
    case wire::PdsType::kNack:
    case wire::PdsType::kNackCcx:
      dst = pkt_.nack.dpdcid;
      src = pkt_.nack.spdcid;
      break;
    case wire::PdsType::kCtrl:
      dst = pkt_.ctrl.dpdcid;
      src = pkt_.ctrl.spdcid;
      break;
    default:
      if (pkt_.req.pro.flags & wire::kReqFlagSyn) {
        drop(wire::DropReason::kUnknownConnection);  // Braid sets PDCs up out of band
        return;
      }
      dst = pkt_.req.dpdcid;
      src = pkt_.req.spdcid;
      break;
  }
  Connection* c = connection(dst);
  if (c == nullptr || c->config().remote_id != src || c->config().remote_ip != pkt_.ip.src) {
    drop(wire::DropReason::kUnknownConnection);
    return;
  }
  c->on_packet(pkt_, now);
}

bool Endpoint::wants_to_send() {
  // A queued connection may have lost what it had (its window closed, an
  // error): those at the front are dropped here; each queues itself again
  // when it has something.
  while (!control_.empty() && !conns_[control_.front()]->control_due()) control_.pop();
  if (!control_.empty()) return true;
  while (!data_.empty() && !conns_[data_.front()]->data_ready()) data_.pop();
  return !data_.empty();
}

uint32_t Endpoint::transmit(uint8_t* buf, uint32_t cap, TimeNs now, TxPayloadRef* ext) {
  if (ext != nullptr) ext->len = 0;
  // Control frames first: an ACK held behind another connection's data
  // delays the peer's window and its loss detection.
  for (size_t n = control_.size(); n > 0; --n) {
    const uint16_t id = control_.front();
    Connection& c = *conns_[id];
    const uint32_t len = c.produce_control(buf, cap, now);
    control_.pop();
    if (c.control_due()) control_.push(id);  // more (NACKs, hole ACKs), or no room
    if (len > 0) {
      ++stats_.tx_frames;
      return len;
    }
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
    c.set_external_payload(ext);
    const uint32_t len = c.produce_data_frame(buf, cap, now);
    c.set_external_payload(nullptr);
    if (len > 0) {
      if (++data_run_ >= cfg_.data_quantum && data_.size() > 1) {
        data_.pop();
        data_.push(id);
        data_run_ = 0;
      }
      ++stats_.tx_frames;
      return len;
    }
    data_.pop();
    data_run_ = 0;
  }
  return 0;
}

}  // namespace braid

#include "core/endpoint.h"

#include <algorithm>
#include <cstring>

namespace braid {

Endpoint::Endpoint(const EndpointConfig& cfg) : cfg_(cfg), wheel_(cfg.timer_tick_ns, 4096) {
  decode_.udp_port = cfg.udp_port;
  // A trailer is checked wherever a packet carries one; peers that send
  // none are not refused (each sender chooses).
  decode_.crc_trailer = false;
  decode_.trim_dscp = cfg.trim_dscp;
}

Endpoint::~Endpoint() = default;

Connection* Endpoint::create_connection(ConnectionConfig cfg, CompletionQueue* send_cq,
                                        CompletionQueue* recv_cq) {
  if (connection(cfg.local_id) != nullptr) return nullptr;
  cfg.local_mac = cfg_.mac;
  cfg.local_ip = cfg_.ip;
  cfg.udp_port = cfg_.udp_port;
  cfg.crc_trailer = cfg_.crc_trailer;
  cfg.trim_dscp = cfg_.trim_dscp;
  if (conns_.size() <= cfg.local_id) conns_.resize(size_t{cfg.local_id} + 1);
  conns_[cfg.local_id] = std::make_unique<Connection>(cfg, &mrs_, send_cq, recv_cq, &wheel_);
  conns_[cfg.local_id]->set_immediate_ack_counter(&stats_.immediate_acks);
  active_.push_back(cfg.local_id);
  return conns_[cfg.local_id].get();
}

void Endpoint::destroy_connection(uint16_t local_id) {
  if (connection(local_id) == nullptr) return;
  conns_[local_id].reset();
  active_.erase(std::remove(active_.begin(), active_.end(), local_id), active_.end());
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

bool Endpoint::wants_to_send() const {
  for (uint16_t id : active_) {
    if (conns_[id]->wants_to_send()) return true;
  }
  return false;
}

uint32_t Endpoint::transmit(uint8_t* buf, uint32_t cap, TimeNs now) {
  const uint32_t n = static_cast<uint32_t>(active_.size());
  uint32_t k = tx_cursor_ < n ? tx_cursor_ : 0;
  for (uint32_t i = 0; i < n; ++i) {
    Connection* c = conns_[active_[k]].get();
    if (++k == n) k = 0;
    const uint32_t len = c->produce(buf, cap, now);
    if (len > 0) {
      tx_cursor_ = k;
      ++stats_.tx_frames;
      return len;
    }
  }
  return 0;
}

}  // namespace braid

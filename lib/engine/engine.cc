#include "engine/engine.h"

#include <algorithm>
#include <cstring>

#include "net/arp.h"
#include "wire/byte_order.h"

namespace braid {

namespace {
bool is_arp(const RxFrame& f) {
  return f.len >= wire::kEthernetSize && wire::load_be16(f.data + 12) == wire::kEtherTypeArp;
}
}  // namespace

struct Engine::Arp {
  explicit Arp(const net::ArpConfig& c) : arp(c) {}
  net::Arp arp;
  uint8_t frame[net::kArpFrameSize];
};

Engine::Engine(std::unique_ptr<PacketIo> io, const EngineConfig& cfg)
    : io_(std::move(io)),
      cfg_(cfg),
      endpoint_([&] {
        EndpointConfig ec;
        ec.mac = io_->mac();
        ec.ip = cfg.ip;
        ec.udp_port = cfg.udp_port;
        ec.crc_trailer = cfg.crc_trailer;
        ec.auth = cfg.auth;
        ec.auth_secret = cfg.auth_secret;
        ec.credit.rate_bps = cfg.credit_rate_bps;
        ec.credit.shared_next_at = cfg.credit_shared_next_at;
        ec.cc_per_peer = cfg.cc_per_peer;
        ec.shared_memory = cfg.shared_memory;
        return ec;
      }()),
      rx_(cfg.burst),
      tx_(cfg.burst),
      tx_external_(io_->tx_external()) {
  net::ArpConfig ac;
  ac.mac = io_->mac();
  ac.ip = cfg.ip;
  ac.gateway = cfg.gateway;
  ac.prefix_len = static_cast<uint8_t>(cfg.gateway != 0 ? cfg.prefix_len : 0);
  arp_ = std::make_unique<Arp>(ac);
  port_ok_.store(io_->link_up(), std::memory_order_relaxed);
  // We reach ourselves without asking: packets to our own address are
  // delivered locally (transmit_at), on any port.
  arp_->arp.neighbors().add_static(cfg.ip, io_->mac());
  // Announce ourselves so peers that already wait for us learn our MAC.
  const size_t n = arp_->arp.announce(arp_->frame, sizeof(arp_->frame));
  if (n > 0) send_raw(arp_->frame, static_cast<uint32_t>(n));
}

Engine::~Engine() {
  if (tx_held_ > 0) io_->tx_free(tx_.data(), tx_held_);
  if (group_ == nullptr) return;
  // Frames handed to us and not taken yet go back to their pools.
  for (uint16_t from = 0; from < group_->size(); ++from) {
    if (from == group_index_) continue;
    while (uint32_t k = group_->inbox(from, group_index_).pop(rx_.data(), cfg_.burst)) {
      io_->rx_release(rx_.data(), static_cast<uint16_t>(k));
    }
  }
}

void Engine::join(EngineGroup* group, uint16_t index) {
  group_ = group;
  group_index_ = index;
  steer_out_.assign(group->size(), {});
  for (auto& v : steer_out_) v.reserve(cfg_.burst);
}

bool Engine::steered_elsewhere(const uint8_t* data, uint32_t len, uint16_t* to) const {
  uint16_t id = 0;
  if (!wire::peek_dpdcid(data, len, &id)) return false;
  const uint16_t owner = group_->owner(id);
  if (owner == group_index_) return false;
  *to = owner;
  return true;
}

void Engine::share_arp_reply(const RxFrame& f) {
  // ARP operation (bytes 20-21 of the frame): 2 is a reply.
  constexpr uint32_t kOp = wire::kEthernetSize + 6;
  if (f.len < kOp + 2 || wire::load_be16(f.data + kOp) != 2) return;
  for (uint16_t to = 0; to < group_->size(); ++to) {
    if (to == group_index_) continue;
    TxFrame b;
    if (io_->tx_alloc(&b, 1) != 1) {
      ++stats_.tx_no_buffer;
      continue;
    }
    if (b.cap < f.len) {
      io_->tx_free(&b, 1);
      continue;
    }
    std::memcpy(b.data, f.data, f.len);
    RxFrame copy{b.data, f.len, b.handle};
    hand_over(to, &copy, 1);
  }
}

void Engine::hand_over(uint16_t to, RxFrame* frames, uint16_t n) {
  const uint32_t pushed = group_->inbox(group_index_, to).push(frames, n);
  stats_.steered_out += pushed;
  if (pushed < n) {
    stats_.steer_dropped += n - pushed;
    io_->rx_release(frames + pushed, static_cast<uint16_t>(n - pushed));
  }
}

uint32_t Engine::receive_handed_over(TimeNs t) {
  uint32_t got = 0;
  for (uint16_t from = 0; from < group_->size(); ++from) {
    if (from == group_index_) continue;
    const auto k =
        static_cast<uint16_t>(group_->inbox(from, group_index_).pop(rx_.data(), cfg_.burst));
    if (k == 0) continue;
    for (uint16_t i = 0; i < k; ++i) {
      const RxFrame& f = rx_[i];
      if (is_arp(f)) {
        on_arp(f.data, f.len, t);  // a reply another engine received (share_arp_reply)
      } else {
        endpoint_.receive(f.data, f.len, t);
      }
    }
    io_->rx_release(rx_.data(), k);
    got += k;
  }
  stats_.steered_in += got;
  return got;
}

bool Engine::enable_stats(uint32_t max_conns, uint32_t max_paths, std::string* error) {
  publisher_ = stats::Publisher::create(max_conns, max_paths, error);
  if (!publisher_) return false;
  publish_stats();
  return true;
}

void Engine::publish_stats() {
  if (!publisher_) return;
  const TimeNs t = now();
  publisher_->publish(*this, t);
  stats_next_ = t + cfg_.stats_interval_ns;
}

void Engine::send_raw(const uint8_t* frame, uint32_t len) {
  TxFrame f;
  if (io_->tx_alloc(&f, 1) != 1) {
    ++stats_.tx_no_buffer;
    return;
  }
  if (f.cap < len) {
    io_->tx_free(&f, 1);
    return;
  }
  std::memcpy(f.data, frame, len);
  f.len = len;
  if (io_->tx_burst(&f, 1) == 1) {
    ++stats_.tx_frames;
  } else {
    io_->tx_free(&f, 1);  // ARP retries on its own timer
    ++stats_.tx_ring_full;
  }
}

void Engine::on_arp(const uint8_t* frame, uint32_t len, TimeNs now) {
  ++stats_.arp_frames;
  const size_t n = arp_->arp.on_frame(frame, len, now, arp_->frame, sizeof(arp_->frame));
  if (n > 0) send_raw(arp_->frame, static_cast<uint32_t>(n));
}

void Engine::send_arp_requests(TimeNs now) {
  size_t n;
  while ((n = arp_->arp.poll(now, arp_->frame, sizeof(arp_->frame))) > 0) {
    send_raw(arp_->frame, static_cast<uint32_t>(n));
  }
}

void Engine::add_neighbor(uint32_t ip, const wire::MacAddr& mac) {
  arp_->arp.neighbors().add_static(ip, mac);
}

bool Engine::lookup_neighbor(uint32_t ip, wire::MacAddr* mac) {
  const TimeNs t = now();
  const uint32_t hop = arp_->arp.next_hop(ip);
  if (arp_->arp.lookup(hop, t, mac)) return true;
  arp_->arp.resolve(hop, t);
  return false;
}

bool Engine::resolve_neighbor(uint32_t ip, wire::MacAddr* mac, TimeNs timeout_ns) {
  const TimeNs deadline = now() + timeout_ns;
  const uint32_t hop = arp_->arp.next_hop(ip);
  while (!lookup_neighbor(ip, mac)) {
    if (arp_->arp.state(hop) == net::NeighborState::kFailed || now() >= deadline) return false;
    poll();
  }
  return true;
}

void Engine::learn_neighbor(uint32_t ip, const wire::MacAddr& mac) {
  arp_->arp.neighbors().learn(arp_->arp.next_hop(ip), mac, now());
}

void Engine::route_when_resolved(uint16_t local_id, uint32_t peer_ip) {
  pending_routes_.push_back(PendingRoute{local_id, peer_ip});
  arp_->arp.resolve(arp_->arp.next_hop(peer_ip), now());
}

void Engine::forget_routes(uint16_t local_id) {
  std::erase_if(pending_routes_, [&](const PendingRoute& r) { return r.local_id == local_id; });
}

void Engine::destroy_connection(uint16_t local_id) {
  forget_routes(local_id);
  endpoint_.destroy_connection(local_id);
}

void Engine::close_connection(uint16_t local_id) {
  forget_routes(local_id);
  endpoint_.close_connection(local_id);
}

net::NeighborState Engine::neighbor_state(uint32_t ip) const {
  return arp_->arp.state(arp_->arp.next_hop(ip));
}

void Engine::update_routes(TimeNs now) {
  for (size_t i = 0; i < pending_routes_.size();) {
    const PendingRoute r = pending_routes_[i];
    Connection* c = endpoint_.connection(r.local_id);
    wire::MacAddr mac{};
    const uint32_t hop = arp_->arp.next_hop(r.ip);
    bool done = c == nullptr;
    if (!done && arp_->arp.lookup(hop, now, &mac)) {
      c->set_remote_mac(mac);
      done = true;
    } else if (!done && arp_->arp.state(hop) == net::NeighborState::kFailed) {
      c->set_error(WcStatus::kRetryExcErr);  // no ARP reply: the peer is unreachable
      done = true;
    } else if (!done && arp_->arp.state(hop) == net::NeighborState::kUnknown) {
      // Not in the table (it was full, or the entry went): asked again.
      arp_->arp.resolve(hop, now);
    }
    if (done) {
      pending_routes_[i] = pending_routes_.back();
      pending_routes_.pop_back();
    } else {
      ++i;
    }
  }
}

uint32_t Engine::poll_at(TimeNs t, TimeNs ack_hold_ns) {
  ++stats_.polls;
  uint32_t moved = 0;
  endpoint_.take_ack_asked();  // what was asked before this poll is not its to answer
  const bool after_gap = last_poll_ != kNever && t > last_poll_ && t - last_poll_ >= cfg_.stall_ns;
  if (after_gap) {
    ++stats_.poll_gaps;
    stats_.longest_poll_gap_ns = std::max(stats_.longest_poll_gap_ns, t - last_poll_);
  }
  last_poll_ = t;
  uint16_t n = receive_burst(t);
  moved += n;
  // After a gap, what waits in the ring goes in before the timers run.
  for (uint16_t more = 1; after_gap && n == cfg_.burst && more < cfg_.stall_drain_bursts; ++more) {
    n = receive_burst(t);
    moved += n;
  }
  if (group_ != nullptr) moved += receive_handed_over(t);
  endpoint_.advance(t);
  if (t >= stats_next_) {
    publisher_->publish(*this, t);
    stats_next_ = t + cfg_.stats_interval_ns;
  }
  if (t - port_looked_ >= port_watch_ns) look_at_port(t);
  if (arp_->arp.next_timer() <= t) send_arp_requests(t);
  if (!pending_routes_.empty()) update_routes(t);
  // Packets that asked for an ACK at once are often the last of a message
  // the application answers right away (a ping-pong): the transmit step
  // waits (one poll, or ack_hold_ns), so the ACK leaves in one burst with
  // the answer instead of a burst of its own. Sent alone, it would let the
  // peer's application see its completion before the answer, and wait for
  // it without polling.
  if (endpoint_.take_ack_asked() && !tx_held_back_ && ack_hold_ns != kAckNow) {
    tx_held_back_ = true;
    tx_hold_until_ = t + ack_hold_ns;
    return moved;
  }
  if (tx_held_back_ && t < tx_hold_until_ && ack_hold_ns != kAckNow) return moved;
  return moved + transmit_at(t);
}

uint16_t Engine::receive_burst(TimeNs t) {
  const uint16_t n = io_->rx_burst(rx_.data(), cfg_.burst);
  uint16_t kept = 0;  // frames handled here, released below
  bool steered = false;
  for (uint16_t i = 0; i < n; ++i) {
    const RxFrame f = rx_[i];
    uint16_t owner = 0;
    if (is_arp(f)) {
      on_arp(f.data, f.len, t);
      if (group_ != nullptr) share_arp_reply(f);
    } else if (group_ != nullptr && steered_elsewhere(f.data, f.len, &owner)) {
      steer_out_[owner].push_back(f);
      steered = true;
      continue;
    } else {
      endpoint_.receive(f.data, f.len, t);
    }
    rx_[kept++] = f;
  }
  if (steered) {
    for (uint16_t to = 0; to < steer_out_.size(); ++to) {
      auto& out = steer_out_[to];
      if (out.empty()) continue;
      hand_over(to, out.data(), static_cast<uint16_t>(out.size()));
      out.clear();
    }
  }
  if (kept > 0) io_->rx_release(rx_.data(), kept);
  stats_.rx_frames += n;
  return n;
}

void Engine::look_at_port(TimeNs now) {
  port_looked_ = now;
  const bool ok = io_->link_up() && !tx_stalled();
  if (ok != port_ok_.load(std::memory_order_relaxed)) {
    port_ok_.store(ok, std::memory_order_relaxed);
    ++port_changes_;
  }
}

uint32_t Engine::transmit() {
  return transmit_at(now());
}

uint32_t Engine::transmit_at(TimeNs t) {
  tx_held_back_ = false;
  // Frames a full TX ring handed back (tx_[0..tx_held_)) leave first, in
  // order; while any are left no new frame is built, so a slow NIC holds
  // the transport back instead of losing what it sent.
  uint16_t filled = tx_held_;
  if (filled == cfg_.burst) return flush_tx(filled, t);
  // A packet to our own address is received at once from the buffer it was
  // built in, as a NIC hands same-port traffic back to its host: a QP
  // connected to a QP of this device works on any port, needs no ARP and
  // costs no wire. What that delivery makes ready (the ACK, the next
  // packets) is built in this same loop, up to a bound per call.
  const uint32_t max_local = 4u * cfg_.burst;
  uint32_t local = 0;
  // Buffers are taken 2 at first (a ping-pong's answer and its ACK), then 8
  // at a time, so one ready packet does not cost a whole burst of
  // allocations and frees; the frames still leave in one tx_burst (a virtio
  // kick is per burst).
  uint32_t chunk = 2;
  while (filled < cfg_.burst && local < max_local && endpoint_.wants_to_send()) {
    const uint16_t want = static_cast<uint16_t>(std::min<uint32_t>(chunk, cfg_.burst - filled));
    chunk = 8;
    uint16_t k = io_->tx_alloc(tx_.data() + filled, want);
    if (k == 0) {
      ++stats_.tx_no_buffer;
      break;
    }
    uint16_t used = 0;
    while (used < k && local < max_local) {
      TxFrame& f = tx_[filled + used];
      TxOut out{f.data, f.cap, tx_external_};
      f.len = endpoint_.transmit(out, t);
      if (f.len == 0) break;
      const bool self = out.dst_ip == cfg_.ip;
      f.ext = nullptr;
      f.ext_len = 0;
      if (out.payload_len > 0) {
        if (self) {
          // Delivered here, read as one frame: the payload goes in.
          std::memcpy(f.data + f.len, out.payload, out.payload_len);
          f.len += out.payload_len;
        } else {
          f.ext = out.payload;
          f.ext_len = out.payload_len;
          ++stats_.tx_external;
        }
      }
      if (self) {
        ++local;
        const uint16_t owner = group_ == nullptr ? group_index_ : group_->owner(out.dst_pdc);
        if (owner == group_index_) {
          endpoint_.receive(f.data, f.len, t);
          continue;  // the buffer is built again
        }
        // To a connection of another engine of the group: the buffer is
        // its now, and this slot takes a new one (or the batch's last).
        RxFrame r{f.data, f.len, f.handle};
        hand_over(owner, &r, 1);
        if (io_->tx_alloc(&f, 1) != 1) {
          ++stats_.tx_no_buffer;
          if (--k == used) break;
          f = tx_[filled + k];
        }
        continue;
      }
      ++used;
    }
    if (used < k) io_->tx_free(tx_.data() + filled + used, static_cast<uint16_t>(k - used));
    filled = static_cast<uint16_t>(filled + used);
    if (used < k) break;
  }
  stats_.local_frames += local;
  return (filled > 0 ? flush_tx(filled, t) : 0) + local;
}

uint32_t Engine::flush_tx(uint16_t filled, TimeNs t) {
  const uint16_t sent = io_->tx_burst(tx_.data(), filled);
  stats_.tx_frames += sent;
  tx_held_ = static_cast<uint16_t>(filled - sent);
  if (sent > 0 || tx_held_ == 0) tx_blocked_since_ = kNever;
  if (tx_held_ > 0) {
    stats_.tx_ring_full += tx_held_;
    if (sent == 0 && tx_blocked_since_ == kNever) tx_blocked_since_ = t;
    std::memmove(tx_.data(), tx_.data() + sent, tx_held_ * sizeof(TxFrame));
  }
  return sent;
}

TimeNs Engine::tx_blocked_ns() const {
  if (tx_held_ == 0 || tx_blocked_since_ == kNever) return 0;
  const TimeNs t = now();
  return t > tx_blocked_since_ ? t - tx_blocked_since_ : 0;
}

}  // namespace braid

#include "net/arp.h"

#include <algorithm>
#include <cstring>

#include "wire/byte_order.h"

namespace braid::net {

namespace {

TimeNs add_sat(TimeNs a, TimeNs b) {
  TimeNs r;
  return __builtin_add_overflow(a, b, &r) ? kNever : r;
}

bool is_multicast(const MacAddr& m) {
  return (m[0] & 1) != 0;  // includes broadcast
}

bool is_zero(const MacAddr& m) {
  return m == MacAddr{};
}

void load_mac(const uint8_t* p, MacAddr* m) {
  std::memcpy(m->data(), p, 6);
}

void store_mac(uint8_t* p, const MacAddr& m) {
  std::memcpy(p, m.data(), 6);
}

}  // namespace

const char* arp_error_name(ArpError e) {
  switch (e) {
    case ArpError::kNone:
      return "none";
    case ArpError::kTruncated:
      return "truncated";
    case ArpError::kNotArp:
      return "not_arp";
    case ArpError::kNotEthernetIpv4:
      return "not_ethernet_ipv4";
    case ArpError::kBadAddressLength:
      return "bad_address_length";
    case ArpError::kUnknownOpcode:
      return "unknown_opcode";
    case ArpError::kCount:
      break;
  }
  return "?";
}

const char* neighbor_state_name(NeighborState s) {
  switch (s) {
    case NeighborState::kUnknown:
      return "unknown";
    case NeighborState::kIncomplete:
      return "incomplete";
    case NeighborState::kReachable:
      return "reachable";
    case NeighborState::kStatic:
      return "static";
    case NeighborState::kFailed:
      return "failed";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Wire format

ArpError parse_arp(const uint8_t* frame, size_t len, ArpPacket* out) {
  if (len < wire::kEthernetSize) return ArpError::kTruncated;
  if (wire::load_be16(frame + 12) != wire::kEtherTypeArp) return ArpError::kNotArp;
  if (len < kArpHeaderSize) return ArpError::kTruncated;
  const uint8_t* a = frame + wire::kEthernetSize;
  if (wire::load_be16(a) != kArpHtypeEthernet || wire::load_be16(a + 2) != wire::kEtherTypeIpv4) {
    return ArpError::kNotEthernetIpv4;
  }
  if (a[4] != 6 || a[5] != 4) return ArpError::kBadAddressLength;
  const uint16_t op = wire::load_be16(a + 6);
  if (op != kArpOpRequest && op != kArpOpReply) return ArpError::kUnknownOpcode;

  load_mac(frame, &out->eth_dst);
  load_mac(frame + 6, &out->eth_src);
  out->op = op;
  load_mac(a + 8, &out->sender_mac);
  out->sender_ip = wire::load_be32(a + 14);
  load_mac(a + 18, &out->target_mac);
  out->target_ip = wire::load_be32(a + 24);
  return ArpError::kNone;
}

size_t build_arp(uint8_t* buf, size_t cap, const ArpPacket& p) {
  if (cap < kArpFrameSize) return 0;
  store_mac(buf, p.eth_dst);
  store_mac(buf + 6, p.eth_src);
  wire::store_be16(buf + 12, wire::kEtherTypeArp);
  uint8_t* a = buf + wire::kEthernetSize;
  wire::store_be16(a, kArpHtypeEthernet);
  wire::store_be16(a + 2, wire::kEtherTypeIpv4);
  a[4] = 6;
  a[5] = 4;
  wire::store_be16(a + 6, p.op);
  store_mac(a + 8, p.sender_mac);
  wire::store_be32(a + 14, p.sender_ip);
  store_mac(a + 18, p.target_mac);
  wire::store_be32(a + 24, p.target_ip);
  std::memset(buf + kArpHeaderSize, 0, kArpFrameSize - kArpHeaderSize);
  return kArpFrameSize;
}

size_t build_arp_probe(uint8_t* buf, size_t cap, const MacAddr& mac, uint32_t ip,
                       const MacAddr& target_mac, uint32_t target_ip) {
  ArpPacket p;
  p.eth_dst = target_mac;
  p.eth_src = mac;
  p.op = kArpOpRequest;
  p.sender_mac = mac;
  p.sender_ip = ip;
  p.target_ip = target_ip;  // target_mac stays zero: it is what we ask for
  return build_arp(buf, cap, p);
}

size_t build_arp_request(uint8_t* buf, size_t cap, const MacAddr& mac, uint32_t ip,
                         uint32_t target_ip) {
  return build_arp_probe(buf, cap, mac, ip, kBroadcastMac, target_ip);
}

size_t build_arp_reply(uint8_t* buf, size_t cap, const MacAddr& mac, uint32_t ip,
                       const MacAddr& target_mac, uint32_t target_ip) {
  ArpPacket p;
  p.eth_dst = target_mac;
  p.eth_src = mac;
  p.op = kArpOpReply;
  p.sender_mac = mac;
  p.sender_ip = ip;
  p.target_mac = target_mac;
  p.target_ip = target_ip;
  return build_arp(buf, cap, p);
}

size_t build_gratuitous_arp(uint8_t* buf, size_t cap, const MacAddr& mac, uint32_t ip) {
  return build_arp_request(buf, cap, mac, ip, ip);
}

// ---------------------------------------------------------------------------
// NeighborTable

NeighborTable::NeighborTable(uint32_t capacity, const NeighborConfig& cfg) : cfg_(cfg) {
  capacity = std::min<uint32_t>(capacity, 1u << 24);
  cfg_.max_requests = std::max<uint32_t>(cfg_.max_requests, 1);
  // At most half the slots are used: probe sequences stay short.
  uint32_t slots = 2;
  while (slots < 2 * capacity) slots *= 2;
  shift_ = 32 - static_cast<uint32_t>(__builtin_ctz(slots));
  slots_.assign(slots, kEmpty);
  entries_.resize(capacity);
  free_.reserve(capacity);
  for (uint32_t i = capacity; i > 0; --i) free_.push_back(i - 1);
}

uint32_t NeighborTable::home_slot(uint32_t ip) const {
  return (ip * 0x9e3779b1u) >> shift_;  // Fibonacci hashing: consecutive IPs spread out
}

uint32_t NeighborTable::find_slot(uint32_t ip) const {
  const uint32_t mask = static_cast<uint32_t>(slots_.size()) - 1;
  for (uint32_t s = home_slot(ip);; s = (s + 1) & mask) {
    if (slots_[s] == kEmpty) return kEmpty;
    if (entries_[slots_[s]].ip == ip) return s;
  }
}

const Neighbor* NeighborTable::find(uint32_t ip) const {
  const uint32_t s = find_slot(ip);
  return s == kEmpty ? nullptr : &entries_[slots_[s]];
}

Neighbor* NeighborTable::find_mut(uint32_t ip) {
  const uint32_t s = find_slot(ip);
  return s == kEmpty ? nullptr : &entries_[slots_[s]];
}

NeighborState NeighborTable::state(uint32_t ip) const {
  const Neighbor* n = find(ip);
  return n ? n->state : NeighborState::kUnknown;
}

bool NeighborTable::evict(TimeNs now) {
  (void)now;
  Neighbor* victim = nullptr;
  for (Neighbor& n : entries_) {
    if (n.state == NeighborState::kFailed) {
      victim = &n;
      break;
    }
    if (n.state == NeighborState::kReachable &&
        (victim == nullptr || n.expires_at < victim->expires_at)) {
      victim = &n;
    }
  }
  if (victim == nullptr) return false;
  erase_slot(find_slot(victim->ip));
  ++stats_.evicted;
  return true;
}

Neighbor* NeighborTable::insert(uint32_t ip, TimeNs now, bool may_evict) {
  if (count_ == capacity()) expire(now);  // reclaim expired and failed entries first
  if (count_ == capacity() && may_evict) evict(now);
  if (count_ == capacity()) {
    ++stats_.table_full;
    return nullptr;
  }
  const uint32_t idx = free_.back();
  free_.pop_back();
  entries_[idx] = Neighbor{};
  entries_[idx].ip = ip;
  const uint32_t mask = static_cast<uint32_t>(slots_.size()) - 1;
  uint32_t s = home_slot(ip);
  while (slots_[s] != kEmpty) s = (s + 1) & mask;
  slots_[s] = idx;
  ++count_;
  return &entries_[idx];
}

// Backward-shift deletion: later members of the probe run move up into the
// hole when their home slot allows, so lookups never need tombstones.
void NeighborTable::erase_slot(uint32_t slot) {
  const uint32_t idx = slots_[slot];
  entries_[idx] = Neighbor{};
  free_.push_back(idx);
  --count_;
  const uint32_t mask = static_cast<uint32_t>(slots_.size()) - 1;
  uint32_t hole = slot;
  for (uint32_t j = (slot + 1) & mask; slots_[j] != kEmpty; j = (j + 1) & mask) {
    const uint32_t home = home_slot(entries_[slots_[j]].ip);
    // The member at j may move to the hole if its home is not in (hole, j].
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      slots_[hole] = slots_[j];
      hole = j;
    }
  }
  slots_[hole] = kEmpty;
}

bool NeighborTable::remove(uint32_t ip) {
  const uint32_t s = find_slot(ip);
  if (s == kEmpty) return false;
  erase_slot(s);
  return true;
}

TimeNs NeighborTable::due(const Neighbor& n) const {
  switch (n.state) {
    case NeighborState::kIncomplete:
      // The next request, or giving up once the last one went unanswered.
      return n.requests == 0 ? 0 : add_sat(n.last_request_at, cfg_.retry_interval_ns);
    case NeighborState::kReachable: {
      if (n.has_candidate) {
        // Probing the MAC we hold: the next probe, or the switch.
        return n.requests == 0 ? 0 : add_sat(n.last_request_at, cfg_.retry_interval_ns);
      }
      TimeNs t = n.expires_at;
      if (n.used && n.requests < cfg_.max_requests) {
        TimeNs refresh;
        if (n.requests > 0) {
          refresh = add_sat(n.last_request_at, cfg_.retry_interval_ns);
        } else {
          TimeNs lead;
          if (__builtin_mul_overflow(cfg_.retry_interval_ns, TimeNs{cfg_.max_requests}, &lead)) {
            lead = kNever;
          }
          refresh = n.expires_at > lead ? n.expires_at - lead : 0;
        }
        t = std::min(t, refresh);
      }
      return t;
    }
    case NeighborState::kFailed:
      return n.expires_at;
    case NeighborState::kUnknown:
    case NeighborState::kStatic:
      break;
  }
  return kNever;
}

void NeighborTable::note(const Neighbor& n) {
  next_event_ = std::min(next_event_, due(n));
}

bool NeighborTable::add_static(uint32_t ip, const MacAddr& mac) {
  Neighbor* n = find_mut(ip);
  if (!n) {
    if (count_ == capacity()) {
      ++stats_.table_full;
      return false;
    }
    n = insert(ip, 0);
  }
  *n = Neighbor{};
  n->ip = ip;
  n->mac = mac;
  n->state = NeighborState::kStatic;
  return true;
}

bool NeighborTable::lookup(uint32_t ip, TimeNs now, MacAddr* out) {
  Neighbor* n = find_mut(ip);
  if (!n) return false;
  if (n->state == NeighborState::kStatic) {
    *out = n->mac;
    return true;
  }
  if (n->state != NeighborState::kReachable || now >= n->expires_at) return false;
  *out = n->mac;
  if (!n->used) {
    n->used = true;
    note(*n);
  }
  return true;
}

bool NeighborTable::learn(uint32_t ip, const MacAddr& mac, TimeNs now, bool create) {
  Neighbor* n = find_mut(ip);
  if (!n) {
    if (!create) return false;
    n = insert(ip, now);
    if (!n) return false;
  }
  switch (n->state) {
    case NeighborState::kStatic:
      if (n->mac != mac) {
        ++stats_.static_conflicts;
        return false;
      }
      return true;
    case NeighborState::kReachable:
      if (n->mac != mac) {
        ++stats_.mac_changes;
      } else {
        ++stats_.refreshed;
      }
      break;
    case NeighborState::kUnknown:  // just inserted
    case NeighborState::kIncomplete:
    case NeighborState::kFailed:
      ++stats_.learned;
      break;
  }
  confirm(*n, mac, now);
  return true;
}

void NeighborTable::confirm(Neighbor& n, const MacAddr& mac, TimeNs now) {
  n.mac = mac;
  n.state = NeighborState::kReachable;
  n.used = false;
  n.requests = 0;
  n.last_request_at = 0;
  n.has_candidate = false;
  n.expires_at = add_sat(now, cfg_.reachable_ns);
  note(n);
}

bool NeighborTable::on_reply(uint32_t ip, const MacAddr& mac, TimeNs now) {
  Neighbor* n = find_mut(ip);
  if (n == nullptr) {
    ++stats_.unsolicited;
    return false;
  }
  switch (n->state) {
    case NeighborState::kStatic:
      if (n->mac != mac) ++stats_.static_conflicts;
      return false;
    case NeighborState::kIncomplete:  // being resolved (its request may not be out yet)
      ++stats_.learned;
      confirm(*n, mac, now);
      return true;
    case NeighborState::kFailed:  // asked, and answered late
      ++stats_.learned;
      confirm(*n, mac, now);
      return true;
    case NeighborState::kReachable:
      if (n->requests == 0) {  // no refresh under way: nobody asked
        if (n->mac != mac) challenge(ip, mac, now);
        break;
      }
      if (n->mac == mac) {
        if (n->has_candidate) ++stats_.mac_change_refused;
        ++stats_.refreshed;
        confirm(*n, mac, now);
        return true;
      }
      // Another MAC: held until the MAC we have stops answering.
      n->candidate = mac;
      n->has_candidate = true;
      note(*n);
      return true;
    case NeighborState::kUnknown:
      break;
  }
  ++stats_.unsolicited;
  return false;
}

bool NeighborTable::resolve(uint32_t ip, TimeNs now) {
  Neighbor* n = find_mut(ip);
  if (n) {
    switch (n->state) {
      case NeighborState::kStatic:
      case NeighborState::kIncomplete:
        return true;
      case NeighborState::kReachable:
        if (now < n->expires_at) return true;
        break;
      case NeighborState::kFailed:
      case NeighborState::kUnknown:
        break;
    }
  } else {
    n = insert(ip, now, /*may_evict=*/true);
    if (!n) return false;
  }
  n->state = NeighborState::kIncomplete;
  n->used = false;
  n->requests = 0;
  n->last_request_at = 0;
  n->expires_at = kNever;
  note(*n);
  return true;
}

void NeighborTable::challenge(uint32_t ip, const MacAddr& mac, TimeNs now) {
  Neighbor* n = find_mut(ip);
  if (n == nullptr || n->state != NeighborState::kReachable || n->mac == mac || n->has_candidate) {
    return;
  }
  n->candidate = mac;
  n->has_candidate = true;
  n->requests = 0;
  n->last_request_at = now;
  ++stats_.challenges;
  note(*n);
}

bool NeighborTable::next_request(TimeNs now, uint32_t* target_ip, MacAddr* unicast_to,
                                 bool* unicast) {
  if (unicast != nullptr) *unicast = false;
  return run_timers(now, target_ip, unicast_to, unicast);
}

void NeighborTable::expire(TimeNs now) {
  run_timers(now, nullptr);
}

bool NeighborTable::run_timers(TimeNs now, uint32_t* want, MacAddr* unicast_to, bool* unicast) {
  if (now < next_event_) return false;
  bool took = false;
  TimeNs next = kNever;
  // Erasing only touches the hash index and frees the entry, so walking the
  // entries while erasing is safe.
  for (Neighbor& n : entries_) {
    switch (n.state) {
      case NeighborState::kUnknown:
      case NeighborState::kStatic:
        continue;
      case NeighborState::kIncomplete:
        if (due(n) > now) break;
        if (n.requests >= cfg_.max_requests) {
          n.state = NeighborState::kFailed;
          n.expires_at = add_sat(now, cfg_.reachable_ns);
          ++stats_.failed;
        } else if (want && !took) {
          ++n.requests;
          n.last_request_at = now;
          *want = n.ip;
          took = true;
        }
        break;
      case NeighborState::kReachable:
      case NeighborState::kFailed:
        if (n.state == NeighborState::kReachable && n.has_candidate &&
            n.requests >= cfg_.max_requests &&
            now >= add_sat(n.last_request_at, cfg_.retry_interval_ns)) {
          // Every probe to the MAC we held went unanswered: the peer moved.
          ++stats_.mac_changes;
          confirm(n, n.candidate, now);
          break;
        }
        if (now >= n.expires_at) {
          erase_slot(find_slot(n.ip));
          ++stats_.expired;
          continue;
        }
        if (n.state == NeighborState::kReachable && want && !took && due(n) <= now &&
            n.requests < cfg_.max_requests) {
          ++n.requests;  // a refresh: a unicast probe to the MAC we hold
          n.last_request_at = now;
          *want = n.ip;
          if (unicast_to != nullptr && unicast != nullptr) {
            *unicast_to = n.mac;
            *unicast = true;
          }
          took = true;
        }
        break;
    }
    next = std::min(next, due(n));
  }
  next_event_ = next;
  return took;
}

// ---------------------------------------------------------------------------
// Arp

Arp::Arp(const ArpConfig& cfg) : cfg_(cfg), table_(cfg.capacity, cfg.neighbor) {
  const uint32_t len = std::min<uint32_t>(cfg_.prefix_len, 32);
  netmask_ = len == 0 ? 0 : ~uint32_t{0} << (32 - len);
}

bool Arp::on_link(uint32_t ip) const {
  return cfg_.gateway == 0 || ((ip ^ cfg_.ip) & netmask_) == 0;
}

uint32_t Arp::next_hop(uint32_t peer_ip) const {
  return on_link(peer_ip) ? peer_ip : cfg_.gateway;
}

size_t Arp::on_frame(const uint8_t* frame, size_t len, TimeNs now, uint8_t* reply_buf, size_t cap) {
  ++stats_.rx_frames;
  ArpPacket p;
  const ArpError err = parse_arp(frame, len, &p);
  if (err != ArpError::kNone) {
    ++stats_.errors[static_cast<size_t>(err)];
    return 0;
  }
  if (p.sender_mac == cfg_.mac) {  // our own request or announcement, looped back
    ++stats_.ignored;
    return 0;
  }
  if (is_multicast(p.sender_mac) || is_zero(p.sender_mac)) {
    ++stats_.bad_sender;
    return 0;
  }
  if (p.sender_ip == cfg_.ip) {  // neither answered nor learned: it would hijack our address
    ++stats_.address_conflicts;
    return 0;
  }
  const bool for_us = p.target_ip == cfg_.ip;
  // Unlike RFC 826's merge, only a reply to a request of ours changes the
  // table (NeighborTable::on_reply). The sender of a request is answered,
  // not learned: a spoofed request can neither redirect our traffic nor
  // take a table entry, and the answer is no larger than the request.
  if (p.op == kArpOpReply) {
    if (for_us && p.sender_ip != 0 && table_.on_reply(p.sender_ip, p.sender_mac, now)) return 0;
    ++stats_.ignored;
    return 0;
  }
  if (p.sender_ip != 0 && table_.state(p.sender_ip) == NeighborState::kReachable) {
    table_.challenge(p.sender_ip, p.sender_mac, now);  // nothing if it is the MAC we hold
  }
  if (p.op == kArpOpRequest && for_us) {
    // A peer we are resolving may ask for us first (both ends set up a
    // connection): its request answers ours, as a reply would.
    if (p.sender_ip != 0 && table_.state(p.sender_ip) == NeighborState::kIncomplete) {
      table_.on_reply(p.sender_ip, p.sender_mac, now);
    }
    const size_t n = build_arp_reply(reply_buf, cap, cfg_.mac, cfg_.ip, p.sender_mac, p.sender_ip);
    if (n == 0) {
      ++stats_.reply_no_buffer;
    } else {
      ++stats_.replies_sent;
    }
    return n;
  }
  ++stats_.ignored;  // requests for others, gratuitous ARP
  return 0;
}

size_t Arp::poll(TimeNs now, uint8_t* buf, size_t cap) {
  if (cap < kArpFrameSize) return 0;  // leave the request due for a later call
  uint32_t target = 0;
  MacAddr to{};
  bool unicast = false;
  if (!table_.next_request(now, &target, &to, &unicast)) return 0;
  ++stats_.requests_sent;
  if (unicast) return build_arp_probe(buf, cap, cfg_.mac, cfg_.ip, to, target);
  return build_arp_request(buf, cap, cfg_.mac, cfg_.ip, target);
}

}  // namespace braid::net

#include "switch/soft_switch.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "model/switch_rules.h"

namespace braid::sw {

using model::kIpOff;
using model::kUdpOff;

SoftSwitch::SoftSwitch(const SoftSwitchConfig& config)
    : cfg_(config), rng_(config.seed ^ 0x5eed5eedull) {
  cfg_.ports = std::clamp<uint16_t>(cfg_.ports, 1, 64);
  cfg_.core_links = std::clamp<uint16_t>(cfg_.core_links, 1, 64);
  cfg_.max_frame = std::max<uint32_t>(cfg_.max_frame, 64);
  cfg_.slots = std::max<uint32_t>(cfg_.slots, 16);
  slot_bytes_ = (cfg_.max_frame + 63) / 64 * 64;
  pool_.resize(size_t{cfg_.slots} * slot_bytes_);
  next_.resize(cfg_.slots);
  len_.resize(cfg_.slots);
  at_.resize(cfg_.slots);
  out_.resize(cfg_.slots);
  in_.resize(cfg_.slots);
  core_q_.resize(cfg_.slots);
  delivered_.resize(cfg_.ports);
  for (uint32_t s = cfg_.slots; s-- > 0;) free_slot(s);
  core_.resize(2 * size_t{cfg_.core_links});
  flows_.resize(core_.size());
  for (Queue& q : core_) q.cfg = cfg_.core;
  egress_.resize(cfg_.ports);
  for (Queue& q : egress_) q.cfg = cfg_.egress;
  if (cfg_.uplink_rate_mbps > 0) {
    uplinks_.resize(cfg_.ports);
    for (Queue& q : uplinks_) {
      q.cfg.rate_mbps = cfg_.uplink_rate_mbps;
      q.cfg.buffer_bytes = cfg_.uplink_buffer_bytes;
    }
  }
  host_link_of_.assign(cfg_.ports, -1);
  for (const std::vector<uint16_t>& ports : cfg_.host_links) {
    const int h = static_cast<int>(host_links_.size());
    bool any = false;
    for (uint16_t p : ports) {
      if (p >= cfg_.ports || host_link_of_[p] >= 0) continue;  // unknown, or taken
      host_link_of_[p] = h;
      egress_[p].cfg.rate_mbps = 0;  // the link paces; the port passes on
      any = true;
    }
    if (any) {
      host_links_.emplace_back();
      host_links_.back().cfg = cfg_.egress;
    }
  }
}

namespace {
// An IPv4 frame: the class (data or priority) and marking apply to it.
bool is_ipv4(const uint8_t* f, uint32_t len) {
  return len >= kUdpOff && wire::load_be16(f + 12) == 0x0800;
}
}  // namespace

const char* dir_name(Dir d) {
  return d == Dir::kToHigher ? "to higher ports" : "to lower ports";
}

uint32_t SoftSwitch::alloc_slot() {
  const uint32_t s = free_;
  if (s != kNil) free_ = next_[s];
  return s;
}

uint32_t SoftSwitch::copy_in(const uint8_t* f, uint32_t len, uint16_t in, uint16_t out) {
  const uint32_t s = alloc_slot();
  if (s == kNil) {
    ++stats_.no_buffer;
    return kNil;
  }
  std::memcpy(data(s), f, len);
  len_[s] = len;
  out_[s] = out;
  in_[s] = in;
  return s;
}

bool SoftSwitch::draw(double p) {
  return p >= 1.0 || (p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p);
}

int SoftSwitch::port_of(const uint8_t* mac) const {
  for (const MacEntry& e : macs_) {
    if (std::memcmp(e.mac.data(), mac, 6) == 0) return e.port;
  }
  return -1;
}

uint16_t SoftSwitch::core_link_of(const uint8_t* f) const {
  const uint64_t key = model::ecmp_key(f, cfg_.seed);
  const uint16_t n = cfg_.core_links;
  const auto chosen = static_cast<uint16_t>(key % n);
  if (link_state(chosen) != LinkState::kDown) return chosen;
  // Its link is down: hash over the links still up (as the simulator does).
  uint64_t up = 0;
  for (uint16_t k = 0; k < n; ++k) up += link_state(k) != LinkState::kDown ? 1 : 0;
  if (up == 0) return chosen;
  uint64_t pick = model::mix(key) % up;
  for (uint16_t k = 0; k < n; ++k) {
    if (link_state(k) != LinkState::kDown && pick-- == 0) return k;
  }
  return chosen;
}

void SoftSwitch::receive(uint16_t port, const uint8_t* f, uint32_t len, TimeNs now) {
  ++stats_.received;
  if (port >= cfg_.ports || len < wire::kEthernetSize || len > cfg_.max_frame) {
    ++stats_.refused;
    return;
  }
  // Learn where the source lives.
  const uint8_t* src = f + 6;
  if (!(src[0] & 1)) {
    auto it = std::find_if(macs_.begin(), macs_.end(), [&](const MacEntry& e) {
      return std::memcmp(e.mac.data(), src, 6) == 0;
    });
    if (it == macs_.end()) {
      MacEntry e;
      std::memcpy(e.mac.data(), src, 6);
      e.port = port;
      macs_.push_back(e);
    } else {
      it->port = port;
    }
  }
  const int dst = (f[0] & 1) ? -1 : port_of(f);
  if (dst < 0) {
    // Broadcast or unknown: every other port.
    ++stats_.flooded;
    for (uint16_t p = 0; p < cfg_.ports; ++p) {
      if (p == port) continue;
      const uint32_t s = copy_in(f, len, port, p);
      if (s == kNil) return;
      enqueue(egress_[p], s, now);
    }
    return;
  }
  if (dst == port) {
    ++stats_.refused;
    return;
  }
  const uint32_t s = copy_in(f, len, port, static_cast<uint16_t>(dst));
  if (s == kNil) return;
  const bool ipv4 = wire::load_be16(f + 12) == 0x0800 && len >= kUdpOff + 8;
  if (!ipv4) {
    enqueue(egress_[dst], s, now);
    return;
  }
  const size_t q = index(core_link_of(f), dst > port ? Dir::kToHigher : Dir::kToLower);
  if (!model::is_priority(f, cfg_.trim_dscp)) flows_[q].insert(model::ecmp_key(f, 0));
  if (!uplinks_.empty()) {
    core_q_[s] = static_cast<uint32_t>(q);
    enqueue(uplinks_[port], s, now);  // the host's link first
    return;
  }
  enqueue(core_[q], s, now);
}

void SoftSwitch::enqueue(Queue& q, uint32_t s, TimeNs now) {
  uint8_t* f = data(s);
  uint32_t len = len_[s];
  if (q.state != LinkState::kUp) {
    ++q.stats.dropped;
    free_slot(s);
    return;
  }
  const bool ipv4 = is_ipv4(f, len);
  const bool control = ipv4 && model::is_priority(f, cfg_.trim_dscp);
  if (!control && q.cfg.loss > 0 && draw(q.cfg.loss)) {
    ++q.stats.dropped;
    free_slot(s);
    return;
  }
  const uint64_t data_bytes = q.fifo.data_bytes();
  const model::ClassQueue::Verdict v =
      q.fifo.admit(control, len, q.cfg.buffer_bytes, q.cfg.trim && ipv4, cfg_.trimmed_bytes);
  if (v == model::ClassQueue::Verdict::kDrop) {
    ++q.stats.dropped;
    free_slot(s);
    return;
  }
  if (v == model::ClassQueue::Verdict::kTrim) {
    len = len_[s] = model::trim_frame(f, cfg_.trimmed_bytes, cfg_.trim_dscp);
    ++q.stats.trimmed;
  }
  const bool high = v != model::ClassQueue::Verdict::kData;
  if (!high) ++q.stats.depth_kib[std::min<uint64_t>(data_bytes >> 10, 4095)];
  if (!high && ipv4 &&
      draw(model::wred_probability(q.fifo.queued_bytes(), q.cfg.ecn_kmin_bytes,
                                   q.cfg.ecn_kmax_bytes, q.cfg.ecn_pmax)) &&
      model::mark_ce(f)) {
    ++q.stats.ecn_marked;
  }
  at_[s] = now;
  q.fifo.append(s, len, high, next_.data());
  q.stats.queued_bytes = q.fifo.queued_bytes();
  q.stats.peak_bytes = std::max(q.stats.peak_bytes, q.stats.queued_bytes);
}

TimeNs SoftSwitch::departure(const Queue& q, uint32_t s) const {
  // Serialised at the queue's rate, after whatever went before it.
  const TimeNs ser = q.cfg.rate_mbps == 0 ? 0 : TimeNs{len_[s]} * 8'000 / q.cfg.rate_mbps;
  return std::max(q.busy_until, at_[s]) + ser;
}

uint32_t SoftSwitch::dequeue(Queue& q, TimeNs now) {
  bool high = false;
  const uint32_t s = q.fifo.head(&high);
  if (s == kNil) return kNil;
  const TimeNs dep = departure(q, s);
  if (dep > now) return kNil;
  q.fifo.pop(high, len_[s], next_.data());
  q.busy_until = dep;
  q.stats.queued_bytes = q.fifo.queued_bytes();
  ++q.stats.packets;
  if (!high) {
    ++q.stats.data_packets;
    q.stats.data_bytes += len_[s];
    if (q.stats.first_data_at == 0) q.stats.first_data_at = dep;
    q.stats.last_data_at = dep;
  }
  q.stats.bytes += len_[s];
  at_[s] = dep;  // when it reaches the next queue
  return s;
}

void SoftSwitch::advance(TimeNs now) {
  for (Queue& u : uplinks_) {
    uint32_t s;
    while ((s = dequeue(u, now)) != kNil) enqueue(core_[core_q_[s]], s, at_[s]);
  }
  for (Queue& c : core_) {
    uint32_t s;
    while ((s = dequeue(c, now)) != kNil) {
      const int h = host_link_of_[out_[s]];
      enqueue(h >= 0 ? host_links_[h] : egress_[out_[s]], s, at_[s]);
    }
  }
  for (Queue& l : host_links_) {
    uint32_t s;
    while ((s = dequeue(l, now)) != kNil) enqueue(egress_[out_[s]], s, at_[s]);
  }
}

uint32_t SoftSwitch::transmit(uint16_t port, uint8_t* buf, uint32_t cap, TimeNs now) {
  if (port >= cfg_.ports) return 0;
  Queue& q = egress_[port];
  for (;;) {
    const uint32_t s = dequeue(q, now);
    if (s == kNil) return 0;
    const uint32_t len = len_[s];
    if (len <= cap) {
      const uint8_t* f = data(s);
      std::memcpy(buf, f, len);
      if (is_ipv4(f, len) && !model::is_priority(f, cfg_.trim_dscp)) {
        delivered_[in_[s]] += len;
      }
      free_slot(s);
      return len;
    }
    --q.stats.packets;
    q.stats.bytes -= len;
    ++q.stats.dropped;
    free_slot(s);
  }
}

TimeNs SoftSwitch::next_due() const {
  TimeNs t = kNever;
  auto head_due = [&](const Queue& q) {
    bool high = false;
    const uint32_t s = q.fifo.head(&high);
    if (s != kNil) t = std::min(t, departure(q, s));
  };
  for (const Queue& q : uplinks_) head_due(q);
  for (const Queue& q : core_) head_due(q);
  for (const Queue& q : host_links_) head_due(q);
  for (const Queue& q : egress_) head_due(q);
  return t;
}

void SoftSwitch::drop_all(Queue& q) {
  q.fifo.clear(next_.data(), [&](uint32_t s) {
    ++q.stats.dropped;
    free_slot(s);
  });
  q.stats.queued_bytes = 0;
}

void SoftSwitch::set_link_state(uint16_t link, LinkState state) {
  if (link >= cfg_.core_links) return;
  for (Dir d : {Dir::kToHigher, Dir::kToLower}) {
    Queue& q = core_[index(link, d)];
    q.state = state;
    if (state != LinkState::kUp) drop_all(q);
  }
}

void SoftSwitch::clear_queue_stats() {
  for (std::vector<Queue>* v : {&uplinks_, &core_, &host_links_, &egress_}) {
    for (Queue& q : *v) {
      const uint64_t queued = q.stats.queued_bytes;
      q.stats = QueueStats{};
      q.stats.queued_bytes = q.stats.peak_bytes = queued;
    }
  }
}

uint64_t QueueStats::depth_percentile(double q) const {
  uint64_t total = 0;
  for (uint64_t n : depth_kib) total += n;
  if (total == 0) return 0;
  const auto want = static_cast<uint64_t>(std::ceil(q * static_cast<double>(total)));
  uint64_t seen = 0;
  for (size_t k = 0; k < depth_kib.size(); ++k) {
    seen += depth_kib[k];
    if (seen >= want) return (k + 1) * 1024;
  }
  return depth_kib.size() * 1024;
}

std::string SoftSwitch::describe() const {
  std::string out;
  auto line = [&](const char* what, const Queue& q, const char* state) {
    out += fmt::format(
        "{}: sent {} packets ({} bytes, {} data), dropped {}, trimmed {}, ECN-marked {}, peak "
        "queue {} bytes, queue found by data p50 {} p99 {} bytes, data {} bytes over {} us{}\n",
        what, q.stats.packets, q.stats.bytes, q.stats.data_packets, q.stats.dropped,
        q.stats.trimmed, q.stats.ecn_marked, q.stats.peak_bytes, q.stats.depth_percentile(0.5),
        q.stats.depth_percentile(0.99), q.stats.data_bytes,
        (q.stats.last_data_at - q.stats.first_data_at) / 1000, state);
  };
  for (uint16_t k = 0; k < cfg_.core_links; ++k) {
    const LinkState st = link_state(k);
    for (Dir d : {Dir::kToHigher, Dir::kToLower}) {
      const std::string what = fmt::format("link {} {}", k, dir_name(d));
      const std::string extra = fmt::format(", {} data flows{}", flows_[index(k, d)].size(),
                                            st == LinkState::kDown        ? " (down)"
                                            : st == LinkState::kBlackhole ? " (blackhole)"
                                                                          : "");
      line(what.c_str(), core_[index(k, d)], extra.c_str());
    }
  }
  for (size_t h = 0; h < host_links_.size(); ++h) {
    std::string ports;
    for (uint16_t p = 0; p < cfg_.ports; ++p) {
      if (host_link_of_[p] != static_cast<int>(h)) continue;
      if (!ports.empty()) ports += ',';
      ports += std::to_string(p);
    }
    line(fmt::format("host link {} (ports {})", h, ports).c_str(), host_links_[h], "");
  }
  for (unsigned p = 0; p < uplinks_.size(); ++p) {
    line(fmt::format("uplink {}", p).c_str(), uplinks_[p], "");
  }
  for (unsigned p = 0; p < egress_.size(); ++p) {
    line(fmt::format("port {}", p).c_str(), egress_[p], "");
  }
  out += fmt::format("frames received {}, flooded {}, refused {}, no buffer {}\n", stats_.received,
                     stats_.flooded, stats_.refused, stats_.no_buffer);
  return out;
}

}  // namespace braid::sw

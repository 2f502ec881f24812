#include "network/sim_network.h"

#include <algorithm>

#include "model/switch_rules.h"
#include "wire/byte_order.h"
#include "wire/frame.h"

namespace braid::sim {

int SimNetwork::add_host(Endpoint* ep) {
  Host h;
  h.ep = ep;
  hosts_.push_back(h);
  for (Host& x : hosts_) x.links.resize(hosts_.size(), -1);
  return static_cast<int>(hosts_.size() - 1);
}

void SimNetwork::connect(int a, int b, const LinkConfig& cfg) {
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    Link l;
    l.to = to;
    for (const PathConfig& p : cfg.paths) l.paths.push_back(Path{p, 0, true});
    l.impair = cfg.impair;
    l.stats.per_path.assign(cfg.paths.size(), 0);
    links_.push_back(std::move(l));
    hosts_[from].links[to] = static_cast<int>(links_.size() - 1);
    hosts_[from].gbps = cfg.host_gbps;
  }
}

SimNetwork::Link* SimNetwork::link_between(int from, int to) {
  const int i = hosts_[from].links[to];
  return i < 0 ? nullptr : &links_[i];
}

void SimNetwork::set_path_up(int from, int to, size_t path, bool up) {
  if (Link* l = link_between(from, to)) l->paths.at(path).up = up;
}

void SimNetwork::set_link_up(int a, int b, bool up) {
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    if (Link* l = link_between(from, to)) {
      for (Path& p : l->paths) p.up = up;
    }
  }
}

const LinkStats& SimNetwork::link_stats(int from, int to) const {
  return links_.at(hosts_.at(from).links.at(to)).stats;
}

size_t SimNetwork::path_of(uint16_t entropy, size_t paths) {
  uint32_t h = entropy * 0x9e3779b1u;
  h ^= h >> 15;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  return h % paths;
}

namespace {

uint32_t frame_dst_ip(const uint8_t* f, uint32_t len) {
  if (len < wire::kEthernetSize + wire::kIpv4Size) return 0;
  return wire::load_be32(f + wire::kEthernetSize + 16);
}

}  // namespace

void SimNetwork::send_from(int h, const uint8_t* frame, uint32_t len) {
  // Route by destination IP to the host that owns it.
  const uint32_t dst_ip = frame_dst_ip(frame, len);
  int to = -1;
  for (size_t i = 0; i < hosts_.size(); ++i) {
    if (hosts_[i].ep->config().ip == dst_ip) to = static_cast<int>(i);
  }
  if (to < 0) return;
  Link* l = link_between(h, to);
  if (l == nullptr) return;
  enqueue(*l, to, std::vector<uint8_t>(frame, frame + len));
}

void SimNetwork::drop_burst(int from, int to, uint64_t skip, uint64_t count) {
  Link* l = link_between(from, to);
  if (l == nullptr) return;
  l->drop_from = l->stats.frames + skip + 1;
  l->drop_until = l->drop_from + count;
}

void SimNetwork::enqueue(Link& l, int to, std::vector<uint8_t> f) {
  ++l.stats.frames;
  if (f.size() < wire::kL2L4Size) return;
  if (l.stats.frames >= l.drop_from && l.stats.frames < l.drop_until) {
    ++l.stats.dropped_loss;
    return;
  }
  const uint16_t entropy = wire::load_be16(f.data() + wire::kEthernetSize + wire::kIpv4Size);
  const size_t pi = path_of(entropy, l.paths.size());
  Path& p = l.paths[pi];
  ++l.stats.per_path[pi];
  if (!p.up) {
    ++l.stats.dropped_down;
    return;
  }
  const Impairments& im = l.impair;
  if (now_ >= l.burst_until && chance(im.burst_enter)) {
    const double mean = static_cast<double>(std::max<TimeNs>(im.burst_mean_ns, 1));
    l.burst_until =
        now_ + static_cast<TimeNs>(std::exponential_distribution<double>(1.0 / mean)(rng_));
  }
  const bool in_burst = now_ < l.burst_until;
  if ((in_burst && chance(im.burst_loss)) || chance(im.loss)) {
    ++l.stats.dropped_loss;
    return;
  }
  const double bytes_per_ns = p.cfg.gbps / 8.0;
  const TimeNs start = std::max(now_, p.busy_until);
  const uint64_t queued = static_cast<uint64_t>((start - now_) * bytes_per_ns);
  uint8_t* ip = f.data() + wire::kEthernetSize;
  const bool trimmable = (ip[1] >> 2) != (wire::kDscpAck) && f.size() > im.trimmed_size;
  bool trim = trimmable && chance(im.trim);
  if (queued + f.size() > p.cfg.queue_bytes) {
    if (im.trim_on_overflow && trimmable) {
      trim = true;
    } else {
      ++l.stats.dropped_queue;
      return;
    }
  }
  if (trim) {
    f.resize(model::trim_frame(f.data(), im.trimmed_size, im.trim_dscp));
    ++l.stats.trimmed;
  }
  // WRED with a marking probability rising to 1 at kmax (the switches' rule).
  if ((ip[1] & 3) != wire::kEcnNotEct &&
      chance(model::wred_probability(queued, p.cfg.ecn_kmin_bytes, p.cfg.ecn_kmax_bytes, 1.0))) {
    model::mark_ce(f.data());
    ++l.stats.ecn_marked;
  }
  if (chance(im.corrupt)) {
    const size_t at = std::uniform_int_distribution<size_t>(0, f.size() - 1)(rng_);
    f[at] ^= static_cast<uint8_t>(1u << std::uniform_int_distribution<int>(0, 7)(rng_));
    ++l.stats.corrupted;
  }
  const TimeNs ser = static_cast<TimeNs>(f.size() / bytes_per_ns) + 1;
  p.busy_until = start + ser;
  const TimeNs at = p.busy_until + p.cfg.delay_ns;
  if (chance(im.duplicate)) {
    ++l.stats.duplicated;
    in_flight_.push(Delivery{at + 1, seq_++, to, f});
  }
  in_flight_.push(Delivery{at, seq_++, to, std::move(f)});
}

bool SimNetwork::run(const std::function<bool()>& done, TimeNs until) {
  for (;;) {
    if (done()) return true;
    // Every host: timers, then at most one frame if its NIC is free.
    for (size_t h = 0; h < hosts_.size(); ++h) {
      Host& host = hosts_[h];
      host.ep->advance(now_);
      if (host.nic_busy_until > now_) continue;
      const uint32_t len =
          host.ep->transmit(txbuf_.data(), static_cast<uint32_t>(txbuf_.size()), now_);
      if (len == 0) continue;
      host.nic_busy_until = now_ + static_cast<TimeNs>(len * 8.0 / host.gbps) + 1;
      send_from(static_cast<int>(h), txbuf_.data(), len);
    }
    if (done()) return true;
    // Next moment anything can happen.
    TimeNs next = kNever;
    if (!in_flight_.empty()) next = in_flight_.top().at;
    for (Host& host : hosts_) {
      next = std::min(next, host.ep->next_timer());
      // A host whose NIC was free and still sent nothing waits for an event.
      if (host.nic_busy_until > now_ && host.ep->wants_to_send()) {
        next = std::min(next, host.nic_busy_until);
      }
    }
    if (next == kNever || next > until) {
      now_ = std::max(now_, std::min(next, until));
      return done();
    }
    now_ = std::max(now_, next);
    while (!in_flight_.empty() && in_flight_.top().at <= now_) {
      Delivery d = std::move(const_cast<Delivery&>(in_flight_.top()));
      in_flight_.pop();
      hosts_[d.host].ep->receive(d.frame.data(), static_cast<uint32_t>(d.frame.size()), now_);
    }
  }
}

}  // namespace braid::sim

#include "fabric/fabric.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "model/switch_rules.h"
#include "wire/byte_order.h"
#include "wire/frame.h"

namespace braid::fabric {

// The switch rules and queue discipline shared with the software switch and
// the two-host simulator (sim/model).
using model::ClassQueue;
using model::ecmp_key;
using model::is_priority;
using model::kIpOff;
using model::kUdpOff;
using model::mark_ce;
using model::mix;
using model::trim_frame;
using model::wred_probability;

namespace {

bool later(const auto& x, const auto& y) {
  return x.at != y.at ? x.at > y.at : x.seq > y.seq;
}

}  // namespace

double wred_probability(uint64_t queued, const SwitchConfig& cfg) {
  return wred_probability(queued, cfg.ecn_kmin_bytes, cfg.ecn_kmax_bytes, cfg.ecn_pmax);
}

bool Fabric::wred_mark(uint64_t queued, const SwitchConfig& cfg) {
  const double p = wred_probability(queued, cfg);
  return p >= 1.0 || (p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p);
}

Fabric::Fabric(uint64_t seed, uint32_t max_frame)
    : rng_(seed), slot_bytes_((max_frame + 63) / 64 * 64) {
  heap_.reserve(1 << 16);
}

int Fabric::add_host(Endpoint* ep) {
  Node n;
  n.host = static_cast<int>(hosts_.size());
  nodes_.push_back(n);
  Host h;
  h.ep = ep;
  h.node = static_cast<int>(nodes_.size() - 1);
  hosts_.push_back(h);
  return n.host;
}

int Fabric::add_switch(const SwitchConfig& cfg) {
  Node n;
  n.is_switch = true;
  n.sw = static_cast<int>(switches_.size());
  Switch s;
  s.cfg = cfg;
  s.seed = mix(rng_());
  switches_.push_back(std::move(s));
  nodes_.push_back(n);
  return static_cast<int>(nodes_.size() - 1);
}

int Fabric::connect(int a, int b, const LinkSpec& spec) {
  const int first = static_cast<int>(ports_.size());
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    Port p;
    p.node = from;
    p.peer = to;
    p.bytes_per_ns = spec.gbps / 8.0;
    p.delay_ns = spec.delay_ns;
    ports_.push_back(p);
    nodes_[from].ports.push_back(static_cast<int>(ports_.size() - 1));
  }
  return first;
}

int Fabric::port_between(int node, int peer) const {
  for (int p : nodes_[node].ports) {
    if (ports_[p].peer == peer) return p;
  }
  return kNone;
}

void Fabric::set_port_up(int port, bool up) {
  ports_.at(port).up = up;
}

void Fabric::set_port_rate(int port, double gbps) {
  ports_.at(port).bytes_per_ns = gbps / 8.0;
}

void Fabric::set_port_loss(int port, double probability) {
  ports_.at(port).loss = probability;
}

void Fabric::build_routes() {
  // Hosts by address, for O(1) lookups of a frame's destination.
  uint32_t lo = ~0u, hi = 0;
  for (const Host& h : hosts_) {
    lo = std::min(lo, h.ep->config().ip);
    hi = std::max(hi, h.ep->config().ip);
  }
  ip_base_ = lo;
  host_by_ip_offset_.assign(hosts_.empty() ? 0 : size_t{hi - lo} + 1, kNone);
  for (size_t i = 0; i < hosts_.size(); ++i) {
    int& slot = host_by_ip_offset_[hosts_[i].ep->config().ip - lo];
    if (slot != kNone) throw std::invalid_argument("two hosts with one IPv4 address");
    slot = static_cast<int>(i);
  }
  // Equal-cost next hops: a breadth-first search from each host over the
  // switches; a switch's group towards the host is its ports to neighbours
  // one hop closer.
  std::map<std::vector<int>, uint32_t> group_ids;
  groups_.clear();
  for (Switch& s : switches_) s.route.assign(hosts_.size(), kNil);
  std::vector<int> dist(nodes_.size());
  std::vector<int> frontier, next;
  for (size_t h = 0; h < hosts_.size(); ++h) {
    std::fill(dist.begin(), dist.end(), -1);
    const int start = hosts_[h].node;
    dist[start] = 0;
    frontier.assign(1, start);
    while (!frontier.empty()) {
      next.clear();
      for (int n : frontier) {
        for (int p : nodes_[n].ports) {
          const int m = ports_[p].peer;
          if (dist[m] >= 0 || !nodes_[m].is_switch) continue;
          dist[m] = dist[n] + 1;
          next.push_back(m);
        }
      }
      frontier.swap(next);
    }
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (!nodes_[n].is_switch || dist[n] < 0) continue;
      std::vector<int> hops;
      for (int p : nodes_[n].ports) {
        if (dist[ports_[p].peer] == dist[n] - 1) hops.push_back(p);
      }
      auto [it, fresh] = group_ids.emplace(hops, static_cast<uint32_t>(groups_.size()));
      if (fresh) groups_.push_back(hops);
      switches_[nodes_[n].sw].route[h] = it->second;
    }
  }
}

int Fabric::host_of_ip(uint32_t ip) const {
  const uint32_t off = ip - ip_base_;
  return off < host_by_ip_offset_.size() ? host_by_ip_offset_[off] : kNone;
}

int Fabric::nic_port(const std::vector<int>& nic, const uint8_t* f) const {
  if (nic.size() == 1) return nic[0];
  // The plane: a hash of the addresses and the entropy (UDP source port).
  const uint64_t key = (uint64_t{wire::load_be32(f + kIpOff + 12)} << 32) ^
                       wire::load_be32(f + kIpOff + 16) ^
                       (uint64_t{wire::load_be16(f + kUdpOff)} << 48);
  return nic[mix(key) % nic.size()];
}

std::vector<int> Fabric::trace(int src_host, int dst_host, uint16_t src_port,
                               uint16_t dst_port) const {
  uint8_t f[kUdpOff + 8] = {};
  wire::store_be16(f + 12, wire::kEtherTypeIpv4);
  f[kIpOff + 9] = 17;
  wire::store_be32(f + kIpOff + 12, hosts_[src_host].ep->config().ip);
  wire::store_be32(f + kIpOff + 16, hosts_[dst_host].ep->config().ip);
  wire::store_be16(f + kUdpOff, src_port);
  wire::store_be16(f + kUdpOff + 2, dst_port);
  std::vector<int> out{nic_port(nodes_[hosts_[src_host].node].ports, f)};
  // At most one hop per node: a routing loop cannot run on.
  while (out.size() <= nodes_.size()) {
    const Node& n = nodes_[ports_[out.back()].peer];
    if (!n.is_switch) break;
    const int next = route(ports_[out.back()].peer, f);
    if (next == kNone) break;
    out.push_back(next);
  }
  return out;
}

int Fabric::route(int node, const uint8_t* f) const {
  const Switch& s = switches_[nodes_[node].sw];
  const int dst = host_of_ip(wire::load_be32(f + kIpOff + 16));
  if (dst == kNone || s.route[dst] == kNil) return kNone;
  const std::vector<int>& g = groups_[s.route[dst]];
  if (g.size() == 1) return g[0];
  // The 5-tuple: addresses, protocol, ports.
  const uint64_t key = ecmp_key(f, s.seed);
  const int chosen = g[key % g.size()];
  if (s.cfg.adaptive_routing) {
    int best = kNone;
    for (size_t i = 0; i < g.size(); ++i) {
      const int p = g[(key + i) % g.size()];  // from the hashed member on: ties go its way
      if (ports_[p].up &&
          (best == kNone || ports_[p].queue.queued_bytes() < ports_[best].queue.queued_bytes())) {
        best = p;
      }
    }
    if (best != kNone) return best;
  }
  if (ports_[chosen].up) return chosen;
  // Its link is down: the switch hashes over the members still up.
  int up = 0;
  for (int p : g) up += ports_[p].up ? 1 : 0;
  if (up == 0) return chosen;
  uint64_t pick = mix(key) % static_cast<uint64_t>(up);
  for (int p : g) {
    if (ports_[p].up && pick-- == 0) return p;
  }
  return chosen;
}

void Fabric::push(TimeNs at, Ev kind, uint32_t a, uint32_t b) {
  heap_.push_back(Event{at, seq_++, a, b, kind});
  std::push_heap(heap_.begin(), heap_.end(),
                 [](const Event& x, const Event& y) { return later(x, y); });
}

void Fabric::at(TimeNs when, std::function<void()> fn) {
  uint32_t i;
  if (!free_calls_.empty()) {
    i = free_calls_.back();
    free_calls_.pop_back();
    calls_[i] = std::move(fn);
  } else {
    i = static_cast<uint32_t>(calls_.size());
    calls_.push_back(std::move(fn));
  }
  push(std::max(when, now_), Ev::kCall, i);
}

uint32_t Fabric::alloc_slot() {
  if (free_ == kNil) {
    // Grow by half again (at least 1024 slots): only while the fabric's
    // occupancy still grows.
    const size_t old = slot_len_.size();
    const size_t grown = std::max<size_t>(1024, old + old / 2);
    slots_.resize(grown * slot_bytes_);
    slot_len_.resize(grown, 0);
    slot_next_.resize(grown, kNil);
    slot_in_.resize(grown, kNone);
    for (size_t i = grown; i-- > old;) free_slot(static_cast<uint32_t>(i));
  }
  const uint32_t s = free_;
  free_ = slot_next_[s];
  slot_next_[s] = kNil;
  return s;
}

void Fabric::kick(int host) {
  host_send(host);
  schedule_host_timer(host);
}

void Fabric::schedule_host_timer(int host) {
  Host& h = hosts_[host];
  const TimeNs next = h.ep->next_timer();
  if (next == kNever) return;
  // A deadline already past runs at the next nanosecond: the timer wheel
  // may report a slot's start before its timers are due.
  const TimeNs t = std::max(next, now_ + 1);
  if (h.wake_at != kNever && h.wake_at <= t) return;
  h.wake_at = t;
  push(h.wake_at, Ev::kHostTimer, static_cast<uint32_t>(host));
}

// Appends a frame to one of a port's two FIFOs.
// A host's NIC pulls frames from its endpoint when it can send: the host
// never queues more than one frame per port (plane). With several planes a
// frame leaves on the plane its entropy (UDP source port) hashes to, and
// waits there if that port is busy. Data held by a PFC pause waits too;
// control frames go in the class PFC spares.
void Fabric::host_send(int host) {
  Host& h = hosts_[host];
  const std::vector<int>& nic = nodes_[h.node].ports;
  for (;;) {
    // A port can take a frame when it is idle, or when PFC pauses it with
    // fewer than two data frames held and no control frame waiting: a
    // control frame pulled then still goes (its class is never paused).
    bool can_take = false;
    for (int port : nic) {
      Port& p = ports_[port];
      if (!p.queue.empty() && !p.busy) start_tx(port);
      const bool empty = p.queue.empty();
      const bool paused_room =
          p.paused && !p.queue.priority_waiting() && p.queue.data_at_most_one();
      if (!p.busy && (empty || paused_room)) can_take = true;
    }
    if (!can_take) return;
    const uint32_t s = alloc_slot();
    const uint32_t len = h.ep->transmit(data(s), slot_bytes_, now_);
    if (len == 0) {
      free_slot(s);
      return;
    }
    slot_len_[s] = len;
    const uint8_t* f = data(s);
    const bool control = (f[kIpOff + 1] >> 2) == wire::kDscpAck;
    const int port = nic_port(nic, f);
    Port& p = ports_[port];
    const bool waits = p.busy || (!control && p.paused);
    p.queue.append(s, len, control, slot_next_.data());
    if (!p.busy) start_tx(port);
    // A frame that has to wait ends the pull: the NIC holds at most what
    // its ports can send next.
    if (waits) return;
  }
}

void Fabric::enqueue(int port, uint32_t s) {
  Port& p = ports_[port];
  const SwitchConfig& cfg = switches_[nodes_[p.node].sw].cfg;
  uint8_t* f = data(s);
  uint32_t len = slot_len_[s];
  const bool control = is_priority(f, cfg.trim_dscp);
  // The priority class (ACKs, NACKs, trimmed headers) has a buffer of its
  // own, as big as the data class's: control never waits behind data, and a
  // data queue full of data does not drop it.
  const ClassQueue::Verdict v =
      p.queue.admit(control, len, cfg.buffer_bytes, cfg.trim, cfg.trimmed_bytes, cfg.pfc);
  if (v == ClassQueue::Verdict::kDrop) {
    ++p.stats.dropped;
    ++stats_.dropped;
    stats_.bytes_lost += len;
    free_slot(s);
    return;
  }
  if (v == ClassQueue::Verdict::kTrim) {
    // Trim: keep the headers, say so in the DSCP, send them ahead of data.
    len = trim_frame(f, cfg.trimmed_bytes, cfg.trim_dscp);
    slot_len_[s] = len;
    ++p.stats.trimmed;
    ++stats_.trimmed;
  }
  const bool high = v != ClassQueue::Verdict::kData;
  if (!cfg.ecn_at_dequeue && !high) maybe_mark_ce(port, s, cfg);
  p.queue.append(s, len, high, slot_next_.data());
  if (cfg.pfc && !high) pfc_account(slot_in_[s], len);
  p.stats.peak_queue_bytes = std::max(p.stats.peak_queue_bytes, p.queue.queued_bytes());
  if (!p.busy) start_tx(port);
}

// WRED on the queue the port has now: an ECT data frame may get CE.
void Fabric::maybe_mark_ce(int port, uint32_t s, const SwitchConfig& cfg) {
  Port& p = ports_[port];
  uint8_t* f = data(s);
  const uint8_t tos = f[kIpOff + 1];
  if ((tos & 3) == wire::kEcnNotEct || (tos & 3) == wire::kEcnCe) return;
  if (!wred_mark(p.queue.queued_bytes(), cfg)) return;
  mark_ce(f);
  ++p.stats.ecn_marked;
  ++stats_.ecn_marked;
}

void Fabric::start_tx(int port) {
  Port& p = ports_[port];
  bool high = false;
  const uint32_t s = p.queue.head(&high);
  if (!high && p.paused) return;  // PFC: data waits; control goes
  if (s == kNil) return;
  const uint32_t len = slot_len_[s];
  p.queue.pop(high, len, slot_next_.data());
  const Node& n = nodes_[p.node];
  if (n.is_switch) {
    const SwitchConfig& cfg = switches_[n.sw].cfg;
    if (cfg.pfc && !high) pfc_account(slot_in_[s], -static_cast<int64_t>(len));
    // The class was decided at enqueue: data only (not control, not trimmed).
    if (cfg.ecn_at_dequeue && !high) maybe_mark_ce(port, s, cfg);
  }
  // Whole nanoseconds, the fractions carried to the next frame: a port's
  // clock stays exact over any number of frames.
  const double exact = static_cast<double>(len) / p.bytes_per_ns + p.carry_ns;
  const auto ser = static_cast<TimeNs>(exact);
  p.carry_ns = exact - static_cast<double>(ser);
  p.busy = true;
  ++p.stats.packets;
  p.stats.bytes += len;
  push(now_ + ser, Ev::kTxDone, static_cast<uint32_t>(port));
  if (!p.up) {
    ++p.stats.dropped_down;
    ++stats_.dropped;
    stats_.bytes_lost += len;
    free_slot(s);
    return;
  }
  if (p.loss > 0 &&
      (p.loss >= 1.0 || std::uniform_real_distribution<double>(0, 1)(rng_) < p.loss)) {
    ++p.stats.dropped_loss;
    ++stats_.dropped;
    stats_.bytes_lost += len;
    free_slot(s);
    return;
  }
  TimeNs arrive = now_ + ser + p.delay_ns;
  const Node& peer = nodes_[p.peer];
  if (peer.is_switch) arrive += switches_[peer.sw].cfg.latency_ns;
  push(arrive, Ev::kDeliver, static_cast<uint32_t>(port), s);
}

// PFC: the data a switch holds from one ingress link (`in_port` is the
// sender's egress port of that link). Pause and resume frames reach the
// sender after the link's delay.
void Fabric::pfc_account(int in_port, int64_t delta) {
  if (in_port == kNone) return;
  Port& in = ports_[in_port];
  in.ingress_bytes = static_cast<uint64_t>(static_cast<int64_t>(in.ingress_bytes) + delta);
  const SwitchConfig& cfg = switches_[nodes_[in.peer].sw].cfg;
  if (!in.pause_sent && in.ingress_bytes > cfg.pfc_xoff_bytes) {
    in.pause_sent = true;
    ++stats_.pauses;
    push(now_ + in.delay_ns, Ev::kPause, static_cast<uint32_t>(in_port));
  } else if (in.pause_sent && in.ingress_bytes <= cfg.pfc_xon_bytes) {
    in.pause_sent = false;
    push(now_ + in.delay_ns, Ev::kResume, static_cast<uint32_t>(in_port));
  }
}

void Fabric::set_paused(int port, bool paused) {
  Port& p = ports_[port];
  if (p.paused == paused) return;
  p.paused = paused;
  if (paused) {
    ++p.stats.pauses;
    p.paused_since = now_;
    return;
  }
  p.stats.paused_ns += now_ - p.paused_since;
  stats_.paused_ns += now_ - p.paused_since;
  if (p.busy) return;
  const Node& n = nodes_[p.node];
  if (n.is_switch) {
    start_tx(port);
  } else {
    kick(n.host);
  }
}

void Fabric::deliver(int port, uint32_t s) {
  const Node& n = nodes_[ports_[port].peer];
  if (!n.is_switch) {
    Host& h = hosts_[n.host];
    h.ep->receive(data(s), slot_len_[s], now_);
    free_slot(s);
    ++stats_.packets_delivered;
    kick(n.host);
    if (on_host_activity) on_host_activity(n.host);
    return;
  }
  slot_in_[s] = port;
  const int out = route(ports_[port].peer, data(s));
  if (out == kNone) {
    ++stats_.dropped;
    stats_.bytes_lost += slot_len_[s];
    free_slot(s);
    return;
  }
  enqueue(out, s);
}

bool Fabric::run(const std::function<bool()>& done, TimeNs until) {
  const auto cmp = [](const Event& x, const Event& y) { return later(x, y); };
  while (!heap_.empty()) {
    if (done()) return true;
    if (heap_.front().at > until) {
      now_ = std::max(now_, until);
      return done();
    }
    std::pop_heap(heap_.begin(), heap_.end(), cmp);
    const Event e = heap_.back();
    heap_.pop_back();
    now_ = std::max(now_, e.at);
    ++stats_.events;
    switch (e.kind) {
      case Ev::kDeliver:
        deliver(static_cast<int>(e.a), e.b);
        break;
      case Ev::kTxDone: {
        Port& p = ports_[e.a];
        p.busy = false;
        const Node& n = nodes_[p.node];
        if (n.is_switch) {
          start_tx(static_cast<int>(e.a));
        } else {
          kick(n.host);
          if (on_host_activity) on_host_activity(n.host);
        }
        break;
      }
      case Ev::kHostTimer: {
        Host& h = hosts_[e.a];
        if (h.wake_at != e.at) break;  // superseded by an earlier one
        h.wake_at = kNever;
        h.ep->advance(now_);
        kick(static_cast<int>(e.a));
        if (on_host_activity) on_host_activity(static_cast<int>(e.a));
        break;
      }
      case Ev::kPause:
        set_paused(static_cast<int>(e.a), true);
        break;
      case Ev::kResume:
        set_paused(static_cast<int>(e.a), false);
        break;
      case Ev::kCall: {
        std::function<void()> fn = std::move(calls_[e.a]);
        free_calls_.push_back(e.a);
        fn();
        break;
      }
    }
  }
  return done();
}

}  // namespace braid::fabric

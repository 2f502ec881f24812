#include "fabric/workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>

#include "wire/frame.h"
#include "wire/pds.h"
#include "wire/ses.h"

namespace braid::fabric {
namespace {

constexpr uint32_t kIpBase = 0x0a000001;  // 10.0.0.1, host i at + i
constexpr uint8_t kTrimDscp = 0x0b;

wire::MacAddr mac_of(int host) {
  const auto h = static_cast<uint32_t>(host);
  return {0x02,
          0xfa,
          static_cast<uint8_t>(h >> 24),
          static_cast<uint8_t>(h >> 16),
          static_cast<uint8_t>(h >> 8),
          static_cast<uint8_t>(h)};
}

uint32_t frame_overhead() {
  return wire::kEthernetSize + wire::kIpv4Size + wire::kUdpSize + wire::kRequestSize +
         wire::kSesStandardSize + wire::kCrcTrailerSize;
}

// ECN-CE echoes the connection's entropies have counted.
uint64_t ecn_count(const Connection& c) {
  uint64_t n = 0;
  for (uint32_t e = 0; e < c.paths().count(); ++e)
    n += c.paths().stats(static_cast<uint8_t>(e)).ecn_marked;
  return n;
}

}  // namespace

Profile profile_named(const std::string& name) {
  Profile p;
  p.name = name;
  if (name == "braid") {
    p.entropies = 64;
  } else if (name == "nscc" || name == "nscc-reps" || name == "nscc-bitmap") {
    p.entropies = 64;
    p.cc = CcAlgorithm::kNscc;
    if (name == "nscc-reps") p.paths = PathPolicy::kReps;
    if (name == "nscc-bitmap") p.paths = PathPolicy::kBitmap;
  } else if (name == "credit" || name == "nscc-credit") {
    p.entropies = 64;
    p.paths = PathPolicy::kReps;
    p.credit = true;
    if (name == "nscc-credit") p.cc = CcAlgorithm::kNscc;
  } else if (name == "single-path" || name == "pfc") {
    p.entropies = 1;  // pfc: over a lossless fabric (the switch settings)
  } else if (name == "rocev2-like") {
    p.entropies = 1;  // and PFC, as pfc
    p.cc = CcAlgorithm::kDcqcn;
  } else if (name == "verbs") {
    // lib/verbs's defaults (device.cc, verbs.cc), for runs beside the wire.
    p.entropies = 16;
    p.paths = PathPolicy::kReps;
    p.cc = CcAlgorithm::kNscc;
    p.cc_base_rtt_ns = 25'000;  // BRAID_DEFAULT_BASE_RTT_US
    p.cc_link_bps = 100'000'000'000;
    p.rto_min_ns = ConnectionConfig{}.rto_min_ns;
    p.ack_every = ConnectionConfig{}.ack_every;
    p.max_window_from_measured_rtt = false;
  } else {
    throw std::invalid_argument(
        "unknown profile '" + name +
        "' (braid, nscc, nscc-reps, nscc-bitmap, credit, nscc-credit, single-path, pfc, "
        "rocev2-like, verbs)");
  }
  return p;
}

Experiment::Experiment(const ExperimentConfig& cfg)
    : cfg_(cfg), fabric_(cfg.seed, cfg.profile.mtu + frame_overhead() + 64) {
  const int n = cfg.topo.hosts();
  endpoints_.reserve(n);
  state_.resize(n);
  for (int h = 0; h < n; ++h) {
    EndpointConfig ec;
    ec.mac = mac_of(h);
    ec.ip = kIpBase + static_cast<uint32_t>(h);
    ec.trim_dscp = cfg.topo.sw.trim ? kTrimDscp : 0xff;
    ec.credit.rate_bps = static_cast<uint64_t>(cfg.topo.host_link.gbps * 1e9);
    ec.cc_per_peer = cfg.profile.cc_per_peer;
    endpoints_.push_back(std::make_unique<Endpoint>(ec));
    fabric_.add_host(endpoints_.back().get());
  }
  TopologyConfig topo = cfg.topo;
  topo.sw.trim_dscp = kTrimDscp;
  topo_ = build_topology(fabric_, topo);
  fabric_.on_host_activity = [this](int host) { on_activity(host); };
}

Experiment::~Experiment() = default;

TimeNs base_rtt_ns(const TopologyConfig& t, const Profile& p) {
  const int hops = t.kind == TopologyConfig::Kind::kFatTree ? 6 : 4;  // links each way
  const double frame = p.mtu + frame_overhead();
  const double ser_host = frame * 8 / t.host_link.gbps;
  const double ser_fab = frame * 8 / t.fabric_link.gbps;
  const double one_way = 2 * (t.host_link.delay_ns + ser_host) +
                         (hops - 2) * (t.fabric_link.delay_ns + ser_fab) +
                         (hops - 1) * static_cast<double>(t.sw.latency_ns);
  const double back = 2 * t.host_link.delay_ns + (hops - 2) * t.fabric_link.delay_ns;
  return static_cast<TimeNs>(one_way + back);
}

void Experiment::add_flow(const FlowSpec& f) {
  if (f.src == f.dst || f.src < 0 || f.dst < 0 || f.src >= hosts() || f.dst >= hosts()) {
    throw std::invalid_argument("a flow joins two different hosts of the fabric");
  }
  if (f.after != kNone && (f.after < 0 || static_cast<size_t>(f.after) >= results_.size())) {
    throw std::invalid_argument("a flow can only wait for a flow added before it");
  }
  if (f.bytes == 0 || f.bytes > (1ull << 31)) {
    throw std::invalid_argument("a flow has 1 byte to 2 GiB");
  }
  if (f.src >= (1 << 24) || f.dst >= (1 << 24)) throw std::invalid_argument("host out of range");
  const uint16_t pdc_qp = cfg_.profile.pdc_per_peer ? 0 : f.qp;
  const uint64_t pair_key =
      (uint64_t(uint32_t(f.src)) << 40) | (uint64_t(uint32_t(f.dst)) << 16) | pdc_qp;
  auto found = pair_index_.find(pair_key);
  int pair = found == pair_index_.end() ? kNone : found->second;
  if (pair == kNone) {
    const Profile& p = cfg_.profile;
    ConnectionConfig c;
    c.mtu = p.mtu;
    c.entropy.count = p.entropies;
    c.entropy.policy = p.paths;
    if (p.window_bytes != 0) c.cc.window_bytes = p.window_bytes;
    c.cc.algorithm = p.cc;
    c.cc.base_rtt_ns = p.cc_base_rtt_ns != 0 ? p.cc_base_rtt_ns : base_rtt_ns();
    c.cc.link_bps =
        p.cc_link_bps != 0 ? p.cc_link_bps : static_cast<uint64_t>(cfg_.topo.host_link.gbps * 1e9);
    c.cc.trimming = cfg_.topo.sw.trim;
    c.cc.max_window_from_measured_rtt = p.max_window_from_measured_rtt;
    c.cc.credit = p.credit;
    c.cc.credit_speculative_bytes = p.credit_speculative_bytes;
    c.ack_every = p.ack_every;
    const TimeNs rto =
        p.rto_min_ns != 0 ? p.rto_min_ns : std::max<TimeNs>(100'000, 8 * base_rtt_ns());
    c.rto_min_ns = rto;
    c.rto_initial_ns = rto;
    c.window_packets = 4096;
    c.grow_rings = false;  // once running, a simulation allocates nothing
    c.sq_depth = 64;
    c.rq_depth = 4;
    c.trim_dscp = cfg_.topo.sw.trim ? kTrimDscp : 0xff;
    Pair pr;
    pr.src = f.src;
    pr.dst = f.dst;
    pr.src_cfg = c;
    pr.dst_cfg = c;
    pr.src_cfg.local_id = state_[f.src].next_id++;
    pr.dst_cfg.local_id = state_[f.dst].next_id++;
    pr.src_cfg.remote_id = pr.dst_cfg.local_id;
    pr.dst_cfg.remote_id = pr.src_cfg.local_id;
    pr.src_cfg.remote_mac = mac_of(f.dst);
    pr.dst_cfg.remote_mac = mac_of(f.src);
    pr.src_cfg.remote_ip = kIpBase + static_cast<uint32_t>(f.dst);
    pr.dst_cfg.remote_ip = kIpBase + static_cast<uint32_t>(f.src);
    pairs_.push_back(pr);
    pair = static_cast<int>(pairs_.size() - 1);
    pair_index_.emplace(pair_key, pair);
  }
  Pair& pr = pairs_[pair];
  auto at = std::find(pr.qps.begin(), pr.qps.end(), f.qp);
  if (at == pr.qps.end()) {
    if (!pr.qps.empty()) {
      pr.qpns.emplace_back(state_[f.src].next_id++, state_[f.dst].next_id++);
    }
    pr.qps.push_back(f.qp);
    at = pr.qps.end() - 1;
  }
  FlowResult r;
  r.spec = f;
  results_.push_back(r);
  pair_of_.push_back(pair);
  slot_of_.push_back(static_cast<uint16_t>(at - pr.qps.begin()));
  dependents_.emplace_back();
  placed_at_start_.push_back(0);
  ecn_at_start_.push_back(0);
  if (f.after != kNone) dependents_[f.after].push_back(results_.size() - 1);
}

void Experiment::sample_every(TimeNs period, std::vector<int> ports) {
  sample_period_ = period;
  sample_ports_ = std::move(ports);
}

void Experiment::set_up_flows() {
  set_up_ = true;
  std::vector<uint32_t> sends(hosts(), 0);
  uint64_t largest = 0;
  for (const FlowResult& r : results_) {
    ++sends[r.spec.src];
    largest = std::max(largest, r.spec.bytes);
  }
  for (int h = 0; h < hosts(); ++h) {
    state_[h].scq = std::make_unique<CompletionQueue>(sends[h] + 16);
    state_[h].rcq = std::make_unique<CompletionQueue>(16);
  }
  if (!cfg_.verify) {
    // One source and one destination buffer for every flow: placement does
    // its copies, the bytes of overlapping flows are not looked at.
    scratch_src_.assign(std::max<uint64_t>(largest, 1), 0x5a);
    scratch_dst_.assign(std::max<uint64_t>(largest, 1), 0);
  }
  for (Pair& pr : pairs_) {
    Endpoint& src = *endpoints_[pr.src];
    Endpoint& dst = *endpoints_[pr.dst];
    pr.sender =
        src.create_connection(pr.src_cfg, state_[pr.src].scq.get(), state_[pr.src].rcq.get());
    pr.receiver =
        dst.create_connection(pr.dst_cfg, state_[pr.dst].scq.get(), state_[pr.dst].rcq.get());
    if (pr.sender == nullptr || pr.receiver == nullptr) {
      throw std::runtime_error("more connections on a host than connection ids");
    }
    // The pair's other qps, as queue pairs of its connection in slot order.
    for (const auto& [s, d] : pr.qpns) {
      const uint16_t a = pr.sender->add_queue_pair(
          pr.sender->queue_pair_config(s, d), state_[pr.src].scq.get(), state_[pr.src].rcq.get());
      const uint16_t b = pr.receiver->add_queue_pair(
          pr.receiver->queue_pair_config(d, s), state_[pr.dst].scq.get(), state_[pr.dst].rcq.get());
      if (a == Connection::kNoSlot || a != b) {
        throw std::runtime_error("more queue pairs on a connection than it takes");
      }
    }
  }
  if (cfg_.verify) {
    src_mem_.resize(results_.size());
    dst_mem_.resize(results_.size());
    for (size_t i = 0; i < results_.size(); ++i) {
      src_mem_[i].resize(results_[i].spec.bytes);
      dst_mem_[i].assign(src_mem_[i].size(), 0);
      for (size_t b = 0; b < src_mem_[i].size(); ++b) {
        src_mem_[i][b] = static_cast<uint8_t>(b * 131 + i * 7 + (b >> 12));
      }
    }
  }
  for (size_t i = 0; i < results_.size(); ++i) {
    if (results_[i].spec.after == kNone) {
      fabric_.at(results_[i].spec.start, [this, i] { start_flow(i); });
    }
  }
  open_flows_ = results_.size();
  if (sample_period_ > 0) fabric_.at(0, [this] { sample_chain(); });
}

// One sample every period while flows are open; run() adds the last one.
void Experiment::sample_chain() {
  take_sample();
  if (open_flows_ > 0) {
    fabric_.at(fabric_.now() + sample_period_, [this] { sample_chain(); });
  }
}

void Experiment::take_sample() {
  Sample s;
  s.at = fabric_.now();
  s.flow_bytes.reserve(results_.size());
  for (size_t i = 0; i < results_.size(); ++i) {
    const FlowResult& r = results_[i];
    uint64_t placed = 0;
    if (r.end != kNever) {
      placed = r.spec.bytes;
    } else if (r.started != kNever) {
      const uint64_t pkts = received(i) - placed_at_start_[i];
      placed = std::min<uint64_t>(r.spec.bytes, pkts * cfg_.profile.mtu);
    }
    s.flow_bytes.push_back(placed);
  }
  for (int p : sample_ports_) s.queue_bytes.push_back(fabric_.queue_bytes(p));
  for (size_t f : entropy_flows_) {
    if (f >= results_.size()) continue;
    const Pair& pr = pairs_[pair_of_[f]];
    const PathSet& ps = pr.sender->paths();
    for (uint16_t i = 0; i < ps.count(); ++i) {
      const auto e = static_cast<uint8_t>(i);
      const EntropyStats& es = ps.stats(e);
      s.entropies.push_back({static_cast<uint32_t>(f), i, ps.entropy(e),
                             static_cast<uint8_t>(ps.health(e).state), es.sent, es.acked,
                             es.ecn_marked, es.lost, es.srtt_ns,
                             fabric_.trace(pr.src, pr.dst, ps.entropy(e), pr.src_cfg.udp_port)});
    }
  }
  samples_.push_back(std::move(s));
}

uint64_t Experiment::received(size_t i) const {
  const Pair& pr = pairs_[pair_of_[i]];
  if (pr.qps.size() == 1) return pr.receiver->stats().data_received;
  return pr.receiver->queue_pair(slot_of_[i]).requests_received();
}

void Experiment::start_flow(size_t i) {
  FlowResult& r = results_[i];
  const FlowSpec& f = r.spec;
  if (fabric_.now() < f.start) {  // a dependent flow waits for its own start too
    fabric_.at(f.start, [this, i] { start_flow(i); });
    return;
  }
  Endpoint& src = *endpoints_[f.src];
  Endpoint& dst = *endpoints_[f.dst];
  uint8_t* from = cfg_.verify ? src_mem_[i].data() : scratch_src_.data();
  uint8_t* to = cfg_.verify ? dst_mem_[i].data() : scratch_dst_.data();
  HostState& s = state_[f.src];
  HostState& d = state_[f.dst];
  uint32_t lkey, rkey;
  if (cfg_.verify) {
    lkey = src.memory().register_region(from, f.bytes, kAccessLocalWrite, 0);
    rkey = dst.memory().register_region(to, f.bytes, kAccessLocalWrite | kAccessRemoteWrite, 0);
  } else {
    if (s.src_key == 0) {
      s.src_key = src.memory().register_region(from, scratch_src_.size(), kAccessLocalWrite, 0);
    }
    if (d.dst_key == 0) {
      d.dst_key = dst.memory().register_region(to, scratch_dst_.size(),
                                               kAccessLocalWrite | kAccessRemoteWrite, 0);
    }
    lkey = s.src_key;
    rkey = d.dst_key;
  }
  Pair& pr = pairs_[pair_of_[i]];
  SendRequest wr;
  wr.wr_id = i;
  wr.opcode = Opcode::kWrite;
  wr.local.sge[0] = Sge{from, static_cast<uint32_t>(f.bytes), lkey};
  wr.local.num = 1;
  wr.remote_addr = reinterpret_cast<uintptr_t>(to);
  wr.rkey = rkey;
  r.started = fabric_.now();
  placed_at_start_[i] = received(i);
  ecn_at_start_[i] = ecn_count(*pr.sender);
  if (pr.sender->post_send(slot_of_[i], wr) != PostError::kOk) {
    // Its connection is in error (or full): it fails, flushed, and so does
    // what waits for it.
    r.ok = false;
    r.end = fabric_.now();
    r.status = WcStatus::kWrFlushErr;
    --open_flows_;
    flush_dependents(i);
    return;
  }
  fabric_.kick(f.src);
}

// A step that failed fails what waits for it, and so on: those never
// start (reported as flushed, as a QP in error flushes its queue).
void Experiment::flush_dependents(size_t failed) {
  std::vector<size_t> waiting(dependents_[failed]);
  while (!waiting.empty()) {
    const size_t next = waiting.back();
    waiting.pop_back();
    FlowResult& d = results_[next];
    if (d.end != kNever) continue;
    d.end = fabric_.now();
    d.ok = false;
    d.status = WcStatus::kWrFlushErr;
    --open_flows_;
    waiting.insert(waiting.end(), dependents_[next].begin(), dependents_[next].end());
  }
}

void Experiment::on_activity(int host) {
  CompletionQueue* cq = state_[host].scq.get();
  if (cq == nullptr || cq->size() == 0) return;
  WorkCompletion wc[16];
  uint32_t n;
  while ((n = cq->poll(wc, 16)) > 0) {
    for (uint32_t k = 0; k < n; ++k) {
      if (wc[k].wr_id >= results_.size()) continue;
      const size_t i = wc[k].wr_id;
      FlowResult& r = results_[i];
      if (r.end != kNever) continue;
      r.end = fabric_.now();
      r.ok = wc[k].status == WcStatus::kSuccess;
      r.status = wc[k].status;
      r.ecn_acked = ecn_count(*pairs_[pair_of_[i]].sender) - ecn_at_start_[i];
      --open_flows_;
      if (r.ok) {
        for (size_t next : dependents_[i]) {
          fabric_.at(fabric_.now(), [this, next] { start_flow(next); });
        }
      } else {
        flush_dependents(i);
      }
    }
  }
}

bool Experiment::run(TimeNs until) {
  if (!set_up_) set_up_flows();
  fabric_.run([this] { return open_flows_ == 0; }, until);
  if (sample_period_ > 0 && open_flows_ == 0 && !final_sampled_) {
    final_sampled_ = true;
    take_sample();  // the end state, once
  }
  for (size_t i = 0; i < results_.size(); ++i) {
    FlowResult& r = results_[i];
    r.sender = pairs_[pair_of_[i]].sender->stats();
    r.receiver = pairs_[pair_of_[i]].receiver->stats();
    if (cfg_.verify) r.data_ok = src_mem_[i] == dst_mem_[i];
  }
  return open_flows_ == 0;
}

Summary Experiment::summarize(double wall_s) const {
  Summary s;
  s.flows = results_.size();
  s.wall_s = wall_s;
  std::vector<double> fct, goodput;
  const double line = cfg_.topo.host_link.gbps * cfg_.topo.planes;  // all of a host's ports
  // Transport counters per connection (host pair), not per flow: flows of
  // one pair share theirs.
  for (const Pair& pr : pairs_) {
    if (pr.sender == nullptr) continue;
    s.retransmits += pr.sender->stats().retransmits;
    s.timeouts += pr.sender->stats().timeouts;
    s.nacks += pr.sender->stats().nacks_received;
    s.trimmed_received += pr.receiver->stats().trimmed_received;
  }
  for (const FlowResult& r : results_) {
    if (r.end == kNever) continue;
    if (!r.ok) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.last_end = std::max(s.last_end, r.end);
    const double us = static_cast<double>(r.fct()) / 1000.0;
    fct.push_back(us);
    goodput.push_back(static_cast<double>(r.spec.bytes) * 8 / static_cast<double>(r.fct()) / line *
                      100.0);
  }
  if (!fct.empty()) {
    std::vector<double> sorted = fct;
    std::sort(sorted.begin(), sorted.end());
    auto pct = [&](double q) {
      const size_t i = static_cast<size_t>(std::ceil(q * sorted.size())) - 1;
      return sorted[std::min(i, sorted.size() - 1)];
    };
    s.fct_mean_us = std::accumulate(fct.begin(), fct.end(), 0.0) / fct.size();
    s.fct_p50_us = pct(0.50);
    s.fct_p99_us = pct(0.99);
    s.fct_max_us = sorted.back();
    s.goodput_mean_pct = std::accumulate(goodput.begin(), goodput.end(), 0.0) / goodput.size();
    s.goodput_min_pct = *std::min_element(goodput.begin(), goodput.end());
    double sum = 0, sq = 0;
    for (double g : goodput) {
      sum += g;
      sq += g * g;
    }
    s.jain = sq > 0 ? sum * sum / (goodput.size() * sq) : 0;
  }
  const FabricStats& fs = fabric_.stats();
  s.fabric_dropped = fs.dropped;
  s.fabric_trimmed = fs.trimmed;
  s.fabric_ecn = fs.ecn_marked;
  s.bytes_lost = fs.bytes_lost;
  s.events = fs.events;
  s.pauses = fs.pauses;
  s.paused_ns = fs.paused_ns;
  for (int p = 0; p < fabric_.port_count(); ++p) {
    s.peak_queue_bytes = std::max(s.peak_queue_bytes, fabric_.port_stats(p).peak_queue_bytes);
  }
  return s;
}

std::vector<FlowSpec> permutation(int hosts, uint64_t bytes, uint64_t seed) {
  // Sattolo's shuffle: one cycle through every host, so none sends to itself.
  std::vector<int> to(hosts);
  std::iota(to.begin(), to.end(), 0);
  std::mt19937_64 rng(seed);
  for (int i = hosts - 1; i > 0; --i) {
    const int j = std::uniform_int_distribution<int>(0, i - 1)(rng);
    std::swap(to[i], to[j]);
  }
  std::vector<FlowSpec> flows;
  for (int h = 0; h < hosts && hosts > 1; ++h) flows.push_back(FlowSpec{h, to[h], bytes, 0});
  return flows;
}

std::vector<FlowSpec> incast(int hosts, int senders, int receiver, uint64_t bytes) {
  if (senders < 1 || senders > hosts - 1) throw std::invalid_argument("incast: 1..hosts-1 senders");
  std::vector<FlowSpec> flows;
  // Evenly spaced over the other hosts, so senders sit under many switches.
  for (int i = 0; i < senders; ++i) {
    const int k = static_cast<int>(static_cast<int64_t>(i) * (hosts - 1) / senders);
    const int src = (receiver + 1 + k) % hosts;
    flows.push_back(FlowSpec{src, receiver, bytes, 0});
  }
  return flows;
}

namespace {
// The partner distance of a halving-doubling step.
int prev_distance(int ranks, int log2, int step) {
  const int k = step < log2 ? step : 2 * log2 - 1 - step;
  return ranks >> (k + 1);
}
}  // namespace

std::vector<FlowSpec> all_to_all(int hosts, uint64_t bytes) {
  std::vector<FlowSpec> flows;
  for (int a = 0; a < hosts; ++a) {
    for (int b = 0; b < hosts; ++b) {
      if (a != b) flows.push_back(FlowSpec{a, b, bytes, 0});
    }
  }
  return flows;
}

std::vector<FlowSpec> poisson_load(int hosts, double load, double gbps, uint64_t bytes,
                                   TimeNs duration, uint64_t seed) {
  std::vector<FlowSpec> flows;
  if (hosts < 2 || load <= 0 || bytes == 0 || gbps <= 0) return flows;
  // Flows per ns over the whole fabric: every host offers load x its rate.
  const double per_ns = load * hosts * gbps / 8.0 / static_cast<double>(bytes);
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(per_ns);
  std::uniform_int_distribution<int> any(0, hosts - 1), other(0, hosts - 2);
  for (double t = gap(rng); t < static_cast<double>(duration); t += gap(rng)) {
    const int src = any(rng);
    int dst = other(rng);
    if (dst >= src) ++dst;  // uniform over the hosts but src
    flows.push_back(FlowSpec{src, dst, bytes, static_cast<TimeNs>(t)});
  }
  return flows;
}

std::vector<FlowSpec> ring_allreduce(int ranks, uint64_t bytes) {
  if (ranks < 2) throw std::invalid_argument("allreduce: at least 2 ranks");
  const uint64_t chunk = std::max<uint64_t>(1, bytes / static_cast<uint64_t>(ranks));
  std::vector<FlowSpec> flows;
  const int steps = 2 * (ranks - 1);
  for (int step = 0; step < steps; ++step) {
    for (int r = 0; r < ranks; ++r) {
      FlowSpec f{r, (r + 1) % ranks, chunk, 0};
      // Rank r's step waits for its predecessor's previous step to reach it.
      if (step > 0) f.after = (step - 1) * ranks + (r + ranks - 1) % ranks;
      flows.push_back(f);
    }
  }
  return flows;
}

std::vector<FlowSpec> halving_doubling_allreduce(int ranks, uint64_t bytes) {
  if (ranks < 2 || (ranks & (ranks - 1)) != 0) {
    throw std::invalid_argument("halving-doubling: a power of two of ranks");
  }
  int log2 = 0;
  while ((1 << log2) < ranks) ++log2;
  std::vector<FlowSpec> flows;
  // Steps: reduce-scatter with distances ranks/2 .. 1 and sizes bytes/2 ..
  // bytes/ranks, then allgather with distances 1 .. ranks/2 and sizes
  // bytes/ranks .. bytes/2.
  for (int step = 0; step < 2 * log2; ++step) {
    const int k = step < log2 ? step : 2 * log2 - 1 - step;  // 0 .. log2-1 .. 0
    const int distance = ranks >> (k + 1);
    const uint64_t size = std::max<uint64_t>(1, bytes >> (k + 1));
    for (int r = 0; r < ranks; ++r) {
      FlowSpec f{r, r ^ distance, size, 0};
      // Waits for the data its partner sent it in the previous step.
      if (step > 0) f.after = (step - 1) * ranks + (r ^ prev_distance(ranks, log2, step - 1));
      flows.push_back(f);
    }
  }
  return flows;
}

}  // namespace braid::fabric

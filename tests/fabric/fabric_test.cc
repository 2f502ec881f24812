// The fabric simulator against closed forms (one flow's FCT, a queue's
// growth, ECMP's spread, WRED's probabilities) and the transport's
// invariants on small fabrics across seeds (every byte delivered once and
// intact, losses recovered, runs deterministic). Virtual time only.
#include <gtest/gtest.h>

#include <set>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "fabric/fabric.h"
#include "fabric/topology.h"
#include "fabric/workload.h"
#include "wire/byte_order.h"
#include "wire/frame.h"

namespace braid::fabric {
namespace {

// 16 hosts: a k=4 fat tree at 100 Gb/s, 1 us links, 1 BDP queues with
// trimming and ECN at 20%/80% of the BDP, as the UEC scenarios at 128 hosts.
ExperimentConfig small_fat_tree(const std::string& profile = "braid", bool trim = true) {
  ExperimentConfig c;
  c.topo.kind = TopologyConfig::Kind::kFatTree;
  c.topo.k = 4;
  c.profile = profile_named(profile);
  const double bdp = static_cast<double>(base_rtt_ns(c.topo, c.profile)) * 100.0 / 8.0;
  c.topo.sw.buffer_bytes = static_cast<uint32_t>((trim ? 1 : 5) * bdp);
  c.topo.sw.trim = trim;
  c.topo.sw.ecn_kmin_bytes = static_cast<uint32_t>(0.2 * bdp);
  c.topo.sw.ecn_kmax_bytes = static_cast<uint32_t>(0.8 * bdp);
  return c;
}

TEST(FabricTopology, FatTreeAndLeafSpineHaveTheirShape) {
  {
    ExperimentConfig c = small_fat_tree();
    Experiment x(c);
    EXPECT_EQ(x.hosts(), 16);
    EXPECT_EQ(x.topology().cores.size(), 4u);
    EXPECT_EQ(x.topology().aggs.size(), 8u);
    EXPECT_EQ(x.topology().edges.size(), 8u);
    EXPECT_EQ(x.topology().core_links.size(), 16u);
    // Host ports, edge-agg and agg-core links, both directions each.
    EXPECT_EQ(x.fabric().port_count(), 2 * (16 + 16 + 16));
  }
  {
    ExperimentConfig c;
    c.topo.kind = TopologyConfig::Kind::kLeafSpine;
    c.topo.leaves = 3;
    c.topo.spines = 2;
    c.topo.hosts_per_leaf = 5;
    Experiment x(c);
    EXPECT_EQ(x.hosts(), 15);
    EXPECT_EQ(x.topology().core_links.size(), 6u);
    EXPECT_EQ(x.fabric().port_count(), 2 * (15 + 6));
  }
  // The base RTT of the UEC scenarios (k=8, 100 Gb/s, 1 us, 4 KiB + headers).
  ExperimentConfig c;
  EXPECT_NEAR(static_cast<double>(base_rtt_ns(c.topo, c.profile)), 14'020, 100);
}

// One flow alone across the fat tree (other pod): its sender's NIC is the
// bottleneck, so it completes when its last frame has crossed the six links
// (five store-and-forward hops behind the NIC) and the ACK has come back.
TEST(FabricClosedForm, OneFlowsFctIsItsSerialisationPlusThePathWithinAPacketTime) {
  ExperimentConfig c = small_fat_tree();
  Experiment x(c);
  const uint64_t bytes = 1 << 20;
  x.add_flow(FlowSpec{0, 15, bytes, 1000});
  ASSERT_TRUE(x.run(1'000'000'000));
  const FlowResult& r = x.results()[0];
  ASSERT_TRUE(r.ok);
  const PortStats& tx = x.fabric().port_stats(x.fabric().host_port(0));
  const PortStats& rx = x.fabric().port_stats(x.fabric().host_port(15));
  ASSERT_EQ(tx.packets, bytes / 4096);  // no loss, no retransmission
  const double rate = 100.0 / 8.0;      // bytes per ns
  const double frame = static_cast<double>(tx.bytes) / tx.packets;
  const double ack = static_cast<double>(rx.bytes) / rx.packets;
  const double d = 1000;
  const double expect = tx.bytes / rate + 5 * frame / rate + 6 * d + 6 * (ack / rate + d);
  EXPECT_NEAR(static_cast<double>(r.fct()), expect, frame / rate)
      << "FCT " << r.fct() << " ns, closed form " << expect << " ns";
}

// Two senders at line rate into one receiver on one switch: the receiver's
// port gets 200 Gb/s and drains 100, so its queue grows at 12.5 B/ns.
TEST(FabricClosedForm, AQueueFedAboveItsDrainRateGrowsAtTheDifference) {
  ExperimentConfig c;
  c.topo.kind = TopologyConfig::Kind::kLeafSpine;
  c.topo.leaves = 1;
  c.topo.spines = 1;
  c.topo.hosts_per_leaf = 3;
  c.topo.sw.buffer_bytes = 64u << 20;
  Experiment x(c);
  x.add_flow(FlowSpec{1, 0, 4u << 20, 0});
  x.add_flow(FlowSpec{2, 0, 4u << 20, 0});
  const int port = x.fabric().port_between(x.topology().edges[0], x.fabric().node_of_host(0));
  ASSERT_GE(port, 0);
  std::vector<std::pair<TimeNs, uint64_t>> samples;
  for (TimeNs t = 10'000; t <= 40'000; t += 10'000) {
    x.fabric().at(
        t, [&, port] { samples.emplace_back(x.fabric().now(), x.fabric().queue_bytes(port)); });
  }
  ASSERT_TRUE(x.run(1'000'000'000));
  ASSERT_EQ(samples.size(), 4u);
  for (size_t i = 1; i < samples.size(); ++i) {
    const double slope = static_cast<double>(samples[i].second - samples[i - 1].second) /
                         static_cast<double>(samples[i].first - samples[i - 1].first);
    // Within two frames over the 10 us between samples.
    EXPECT_NEAR(slope, 12.5, 2.0 * 4200 / 10'000) << "between samples " << i - 1 << " and " << i;
  }
}

// The ECMP hash spreads distinct entropies over a switch's uplinks like a
// fair coin: each of the 4 uplinks of an edge switch gets a share within
// five standard deviations of a binomial, and a flow's 64 entropies use all.
TEST(FabricEcmp, EntropiesSpreadOverTheUplinksWithinABinomialBound) {
  ExperimentConfig c = small_fat_tree();
  c.topo.k = 8;
  Experiment x(c);
  const int edge = x.topology().host_edge[0];
  uint8_t frame[128] = {};
  wire::store_be16(frame + 12, wire::kEtherTypeIpv4);
  uint8_t* ip = frame + wire::kEthernetSize;
  ip[9] = 17;
  wire::store_be32(ip + 12, 0x0a000001);
  wire::store_be32(ip + 16, 0x0a000001 + 127);  // another pod: up
  constexpr int kEntropies = 4096;
  std::map<int, int> count;
  for (int e = 0; e < kEntropies; ++e) {
    wire::store_be16(ip + 20, static_cast<uint16_t>(0xc000 + e));
    wire::store_be16(ip + 22, wire::kUetUdpPort);
    ++count[x.fabric().route(edge, frame)];
  }
  ASSERT_EQ(count.size(), 4u);
  const double mean = kEntropies / 4.0, sd = std::sqrt(kEntropies * 0.25 * 0.75);
  for (auto [port, n] : count) EXPECT_NEAR(n, mean, 5 * sd) << "uplink port " << port;
  // One flow's 64 entropies (the core's ports 0xc000 + i): every uplink.
  std::map<int, int> flow;
  for (int e = 0; e < 64; ++e) {
    wire::store_be16(ip + 20, static_cast<uint16_t>(49152 + e) | 0xc000);
    ++flow[x.fabric().route(edge, frame)];
  }
  EXPECT_EQ(flow.size(), 4u);
}

TEST(FabricWred, MarksAtTheConfiguredProbabilities) {
  SwitchConfig s;
  s.ecn_kmin_bytes = 20'000;
  s.ecn_kmax_bytes = 80'000;
  s.ecn_pmax = 0.5;
  EXPECT_EQ(wred_probability(10'000, s), 0.0);
  EXPECT_EQ(wred_probability(20'000, s), 0.0);
  EXPECT_DOUBLE_EQ(wred_probability(50'000, s), 0.25);
  EXPECT_EQ(wred_probability(80'000, s), 1.0);
  // The ports' draws: within five standard deviations of the probability.
  Fabric f(7);
  constexpr int kDraws = 100'000;
  for (uint64_t q : {35'000u, 50'000u, 65'000u}) {
    int marked = 0;
    for (int i = 0; i < kDraws; ++i) marked += f.wred_mark(q, s) ? 1 : 0;
    const double p = wred_probability(q, s);
    EXPECT_NEAR(marked, p * kDraws, 5 * std::sqrt(kDraws * p * (1 - p))) << "queue " << q;
  }
  s.ecn_kmin_bytes = 0;  // off
  EXPECT_FALSE(f.wred_mark(1u << 30, s));
}

// An 8:1 incast with 1-BDP queues: the receiver's port overflows. With
// trimming every cut packet's header reaches the receiver (which counts it)
// and is resent; without, packets are dropped and recovered. Every byte
// arrives intact either way.
TEST(FabricTrimming, TrimmedHeadersAreDeliveredAndEveryFlowCompletesIntact) {
  for (bool trim : {true, false}) {
    ExperimentConfig c = small_fat_tree("braid", trim);
    c.topo.sw.buffer_bytes = static_cast<uint32_t>(c.topo.sw.buffer_bytes / (trim ? 1 : 5));
    c.verify = true;
    Experiment x(c);
    for (const FlowSpec& f : incast(16, 8, 0, 256 * 1024)) x.add_flow(f);
    ASSERT_TRUE(x.run(1'000'000'000)) << "trim " << trim;
    uint64_t trimmed_received = 0, retransmits = 0;
    for (const FlowResult& r : x.results()) {
      EXPECT_TRUE(r.ok);
      EXPECT_TRUE(r.data_ok);
      trimmed_received += r.receiver.trimmed_received;
      retransmits += r.sender.retransmits;
    }
    const FabricStats& fs = x.fabric().stats();
    if (trim) {
      EXPECT_GT(fs.trimmed, 0u);
      EXPECT_EQ(fs.dropped, 0u);
      EXPECT_EQ(trimmed_received, fs.trimmed);
    } else {
      EXPECT_EQ(fs.trimmed, 0u);
      EXPECT_GT(fs.dropped, 0u);
    }
    EXPECT_GE(retransmits, fs.trimmed + fs.dropped);
  }
}

struct RunDigest {
  std::vector<TimeNs> ends;
  uint64_t events = 0;
  bool operator==(const RunDigest&) const = default;
};

// Permutations on 16 hosts across seeds and both profiles: every flow
// completes with its bytes intact, what the fabric lost is resent (and not
// much more), and the same seed gives the same run.
TEST(FabricInvariants, PermutationsDeliverEveryByteOnceAcrossSeeds) {
  for (const char* profile : {"braid", "single-path"}) {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      RunDigest digest[2];
      for (int run = 0; run < 2; ++run) {
        ExperimentConfig c = small_fat_tree(profile);
        c.seed = seed;
        c.verify = run == 0;
        Experiment x(c);
        for (const FlowSpec& f : permutation(16, 512 * 1024, seed)) x.add_flow(f);
        ASSERT_TRUE(x.run(1'000'000'000)) << profile << " seed " << seed;
        uint64_t retransmits = 0, packets = 0;
        for (const FlowResult& r : x.results()) {
          EXPECT_TRUE(r.ok);
          EXPECT_TRUE(r.data_ok);
          digest[run].ends.push_back(r.end);
          retransmits += r.sender.retransmits;
          packets += r.sender.data_sent;
          // Every byte once: the receiver accepted each packet once.
          EXPECT_EQ(r.receiver.data_received, r.spec.bytes / 4096);
        }
        digest[run].events = x.fabric().stats().events;
        const FabricStats& fs = x.fabric().stats();
        const uint64_t lost = fs.trimmed + fs.dropped;
        EXPECT_GE(retransmits, lost) << profile << " seed " << seed;
        EXPECT_LE(retransmits, lost + packets / 20) << profile << " seed " << seed;
      }
      // Verification changes memory only, not the run.
      EXPECT_EQ(digest[0], digest[1]) << profile << " seed " << seed;
    }
  }
}

// Allreduces: each step of a rank starts once the data it waits for (its
// predecessor's, or its partner's, previous step) has arrived, and every
// chunk arrives intact.
TEST(FabricWorkloads, AllreduceStepsWaitForTheDataTheyNeed) {
  for (bool ring : {true, false}) {
    ExperimentConfig c = small_fat_tree();
    c.verify = true;
    Experiment x(c);
    const std::vector<FlowSpec> flows =
        ring ? ring_allreduce(8, 8 * 64 * 1024) : halving_doubling_allreduce(16, 16 * 64 * 1024);
    ASSERT_EQ(flows.size(), ring ? 8u * 14u : 16u * 8u);
    for (const FlowSpec& f : flows) x.add_flow(f);
    ASSERT_TRUE(x.run(1'000'000'000));
    for (const FlowResult& r : x.results()) {
      EXPECT_TRUE(r.ok);
      EXPECT_TRUE(r.data_ok);
      if (r.spec.after == kNone) continue;
      const FlowResult& before = x.results()[r.spec.after];
      EXPECT_EQ(before.spec.dst, r.spec.src);  // it waits for data sent to it
      EXPECT_GE(r.started, before.end);
    }
    if (!ring) {  // halving then doubling: sizes 1/2 .. 1/16 .. 1/2
      EXPECT_EQ(x.results().front().spec.bytes, 8u * 64 * 1024);
      EXPECT_EQ(x.results()[3 * 16].spec.bytes, 64u * 1024);
      EXPECT_EQ(x.results().back().spec.bytes, 8u * 64 * 1024);
    }
  }
}

// Samples of delivered bytes never go back, end at every flow's size, and a
// queue watched at the incast's receiver fills.
TEST(FabricWorkloads, PoissonLoadOffersItsLoadBetweenDistinctHostsUniformly) {
  constexpr int kHosts = 16;
  constexpr uint64_t kBytes = 64 * 1024;
  constexpr TimeNs kDuration = 10'000'000;
  const std::vector<FlowSpec> flows = poisson_load(kHosts, 0.5, 100.0, kBytes, kDuration, 7);
  // Half of 16 hosts' 12.5 B/ns for 10 ms, in 64 KiB flows; a Poisson count
  // has the mean as its variance: within 5 standard deviations.
  const double mean = 0.5 * kHosts * 12.5 * kDuration / kBytes;
  EXPECT_NEAR(static_cast<double>(flows.size()), mean, 5 * std::sqrt(mean));
  std::vector<int> sent(kHosts), received(kHosts);
  TimeNs last = 0;
  for (const FlowSpec& f : flows) {
    ASSERT_NE(f.src, f.dst);
    ASSERT_GE(f.src, 0);
    ASSERT_LT(f.dst, kHosts);
    ASSERT_GE(f.start, last);  // arrivals in order
    ASSERT_LT(f.start, kDuration);
    EXPECT_EQ(f.bytes, kBytes);
    EXPECT_EQ(f.after, kNone);
    last = f.start;
    ++sent[f.src];
    ++received[f.dst];
  }
  // Each host sends and receives a binomial share of 1/16.
  const double n = static_cast<double>(flows.size()), p = 1.0 / kHosts;
  const double sd = std::sqrt(n * p * (1 - p));
  for (int h = 0; h < kHosts; ++h) {
    EXPECT_NEAR(sent[h], n * p, 5 * sd) << "host " << h;
    EXPECT_NEAR(received[h], n * p, 5 * sd) << "host " << h;
  }
  // Deterministic for a seed, different for another.
  const std::vector<FlowSpec> again = poisson_load(kHosts, 0.5, 100.0, kBytes, kDuration, 7);
  const std::vector<FlowSpec> other = poisson_load(kHosts, 0.5, 100.0, kBytes, kDuration, 8);
  ASSERT_EQ(again.size(), flows.size());
  bool same = true, differs = other.size() != flows.size();
  for (size_t i = 0; i < flows.size(); ++i) {
    same = same && again[i].src == flows[i].src && again[i].dst == flows[i].dst &&
           again[i].start == flows[i].start;
    differs = differs || (i < other.size() && other[i].start != flows[i].start);
  }
  EXPECT_TRUE(same);
  EXPECT_TRUE(differs);
  EXPECT_TRUE(poisson_load(kHosts, 0, 100.0, kBytes, kDuration, 7).empty());
  EXPECT_TRUE(poisson_load(1, 0.5, 100.0, kBytes, kDuration, 7).empty());
}

TEST(FabricWorkloads, FlowsOfOneHostPairShareAConnectionUnlessOnAnotherQp) {
  for (const bool two_qps : {false, true}) {
    Experiment x(small_fat_tree());
    FlowSpec f{1, 0, 256 * 1024, 0};
    x.add_flow(f);
    f.qp = two_qps ? 1 : 0;
    x.add_flow(f);
    ASSERT_TRUE(x.run(10'000'000));
    const FlowResult& a = x.results()[0];
    const FlowResult& b = x.results()[1];
    ASSERT_TRUE(a.ok && b.ok);
    if (two_qps) {
      // Side by side on two connections: each sent its own 64 packets and
      // they end within a turn of each other (EndpointConfig::data_quantum
      // packets, a third of a's time at turns of 32); one after the other,
      // they would end a whole flow apart.
      EXPECT_EQ(a.sender.data_sent, 64u);
      EXPECT_EQ(b.sender.data_sent, 64u);
      EXPECT_LT(b.end > a.end ? b.end - a.end : a.end - b.end, a.fct() / 2);
    } else {
      // One connection: the second WRITE follows the first.
      EXPECT_EQ(a.sender.data_sent, 128u);
      EXPECT_GT(b.end, a.end + a.fct() / 2);
    }
  }
}

// Jain's index over two hosts' bytes into host 0 while all their flows ran
// (up to the last sample before the first flow ended): host 8 sends 8 MB
// over four QPs, host 9 8 MB over one. Both are in another pod: a host
// nearer host 0 has a smaller largest window in this profile (htsim's).
double host_share_jain(bool cc_per_peer, const char* profile = "nscc", bool pdc_per_peer = false) {
  ExperimentConfig c = small_fat_tree(profile);
  c.profile.cc_per_peer = cc_per_peer;
  c.profile.pdc_per_peer = pdc_per_peer;
  Experiment x(c);
  for (uint16_t q = 0; q < 4; ++q) x.add_flow(FlowSpec{8, 0, 2u << 20, 0, kNone, q});
  x.add_flow(FlowSpec{9, 0, 8u << 20, 0});
  x.sample_every(10'000, {});
  EXPECT_TRUE(x.run(1'000'000'000));
  TimeNs first_end = kNever;
  for (const FlowResult& r : x.results()) {
    EXPECT_TRUE(r.ok);
    first_end = std::min(first_end, r.end);
  }
  const Experiment::Sample* last = nullptr;
  for (const auto& smp : x.samples()) {
    if (smp.at <= first_end) last = &smp;
  }
  EXPECT_NE(last, nullptr);
  if (last == nullptr) return 0;
  double a = 0;
  for (size_t q = 0; q < 4; ++q) a += static_cast<double>(last->flow_bytes[q]);
  const double b = static_cast<double>(last->flow_bytes[4]);
  EXPECT_GT(a + b, 0);
  return (a + b) * (a + b) / (2 * (a * a + b * b));
}

TEST(FabricWorkloads, AHostsQpsToOnePeerTakeOneHostsShareOfItsLink) {
  // Sharing the congestion state per peer (the default), the two hosts
  // split host 0's link (1.000 when written); a state per QP gives the
  // four QPs four shares (0.818).
  EXPECT_GE(host_share_jain(true), 0.95);
  EXPECT_LT(host_share_jain(false), 0.9);
}

TEST(FabricWorkloads, OnAPdcPerPeerAHostsQpsTakeOneHostsShareOfItsLink) {
  // The four QPs on one connection: one congestion state, whatever the
  // scope of congestion state across connections (a state per connection
  // gave the four QPs on four connections four shares above).
  EXPECT_GE(host_share_jain(false, "nscc", true), 0.95);
  EXPECT_GE(host_share_jain(true, "nscc", true), 0.95);
}

// With a PDC per peer, a host pair's qps are queue pairs of one connection
// pair: each flow's bytes arrive intact, its WRITEs complete on its own
// queue pair, and the flows of one pair run side by side, not one after
// the other.
TEST(FabricWorkloads, APdcPerPeerCarriesAHostPairsQpsOnOneConnection) {
  ExperimentConfig c = small_fat_tree("nscc");
  c.verify = true;
  c.profile.pdc_per_peer = true;
  Experiment x(c);
  for (uint16_t q = 0; q < 4; ++q) x.add_flow(FlowSpec{8, 0, 256u << 10, 0, kNone, q});
  x.add_flow(FlowSpec{8, 0, 64u << 10, 0, 0, 2});  // after flow 0, on qp 2's queue pair
  x.add_flow(FlowSpec{9, 0, 256u << 10, 0});
  x.sample_every(5'000, {});
  ASSERT_TRUE(x.run(1'000'000'000));
  uint64_t host8_sent = 0;
  for (const FlowResult& r : x.results()) {
    EXPECT_TRUE(r.ok);
    EXPECT_TRUE(r.data_ok);
    if (r.spec.src == 8) host8_sent = std::max(host8_sent, r.sender.data_sent);
  }
  // Host 8's five WRITEs went on one connection: its data packets are all
  // of theirs (4 x 64 + 16 of 4 KiB; first transmissions).
  const FlowResult* r = x.results().data();
  EXPECT_EQ(host8_sent, 4u * 64 + 16);
  EXPECT_EQ(r[0].sender.data_sent, 4u * 64 + 16);
  EXPECT_EQ(r[5].sender.data_sent, 64u);
  // Side by side: each of the four first flows had bytes placed before
  // any of them ended.
  TimeNs first_end = kNever;
  for (int i = 0; i < 4; ++i) first_end = std::min(first_end, r[i].end);
  const Experiment::Sample* before = nullptr;
  for (const auto& smp : x.samples()) {
    if (smp.at < first_end) before = &smp;
  }
  ASSERT_NE(before, nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_GT(before->flow_bytes[i], 0u) << "flow " << i;
}

TEST(FabricWorkloads, WithReceiverCreditAHostsQpsTakeOneHostsTurns) {
  // The receiver's credit pacer gives its turns to peers, each passing them
  // to its QPs in turn (0.999 when written); turns per QP gave host A four
  // turns to host B's one (0.735), and still do per QP.
  EXPECT_GE(host_share_jain(true, "nscc-credit"), 0.95);
  EXPECT_LT(host_share_jain(false, "nscc-credit"), 0.9);
}

TEST(FabricWorkloads, TimeSeriesOfDeliveredBytesAndQueues) {
  ExperimentConfig c = small_fat_tree();
  Experiment x(c);
  for (const FlowSpec& f : incast(16, 8, 0, 256 * 1024)) x.add_flow(f);
  const Fabric& f = x.fabric();
  x.sample_every(5'000, {f.port_between(x.topology().host_edge[0], f.node_of_host(0))});
  // In slices, as the app runs it: one sample per period all the same.
  bool done = false;
  for (TimeNs t = 7'000; !done && t < 1'000'000'000; t += 7'000) done = x.run(t);
  ASSERT_TRUE(done);
  const auto& s = x.samples();
  ASSERT_GT(s.size(), 10u);
  uint64_t peak = 0;
  for (size_t i = 1; i < s.size(); ++i) {
    EXPECT_GT(s[i].at, s[i - 1].at);
    for (size_t k = 0; k < s[i].flow_bytes.size(); ++k) {
      EXPECT_GE(s[i].flow_bytes[k], s[i - 1].flow_bytes[k]);
    }
    peak = std::max(peak, s[i].queue_bytes[0]);
  }
  for (uint64_t b : s.back().flow_bytes) EXPECT_EQ(b, 256u * 1024);
  EXPECT_GT(peak, 0u);
}

// A top-tier link goes down mid-transfer: its switch stops choosing it at
// once (local failover), what was queued on it is lost and resent, and
// every flow completes intact.
TEST(FabricEvents, ALinkDownMidTransferIsRoutedAround) {
  ExperimentConfig c = small_fat_tree();
  c.verify = true;
  Experiment x(c);
  for (const FlowSpec& f : permutation(16, 1 << 20, 3)) x.add_flow(f);
  Fabric& f = x.fabric();
  const int port = x.topology().core_links[0];
  const int owner = f.port_peer(port + 1);  // the aggregation switch
  uint8_t frame[128] = {};
  wire::store_be16(frame + 12, wire::kEtherTypeIpv4);
  uint8_t* ip = frame + wire::kEthernetSize;
  ip[9] = 17;
  wire::store_be32(ip + 12, 0x0a000001);       // host 0 (pod 0)
  wire::store_be32(ip + 16, 0x0a000001 + 15);  // host 15 (pod 3)
  int to_down_before = 0;
  for (int e = 0; e < 1024; ++e) {
    wire::store_be16(ip + 20, static_cast<uint16_t>(0xc000 + e));
    to_down_before += f.route(owner, frame) == port ? 1 : 0;
  }
  uint64_t sent_at_down = 0;
  f.at(20'000, [&] {
    f.set_port_up(port, false);
    f.set_port_up(port + 1, false);
    sent_at_down = f.port_stats(port).packets + f.port_stats(port + 1).packets;
  });
  ASSERT_TRUE(x.run(1'000'000'000));
  for (const FlowResult& r : x.results()) {
    EXPECT_TRUE(r.ok);
    EXPECT_TRUE(r.data_ok);
  }
  EXPECT_GT(sent_at_down, 0u);  // it carried traffic before
  // Its switch no longer chooses it: of 1024 entropies from host 0 to
  // host 15 (another pod), about half took it up to the core before; none
  // does now.
  EXPECT_GT(to_down_before, 256);
  int to_down = 0, up_members = 0;
  for (int e = 0; e < 1024; ++e) {
    wire::store_be16(ip + 20, static_cast<uint16_t>(0xc000 + e));
    const int chosen = f.route(owner, frame);
    to_down += chosen == port ? 1 : 0;
    up_members += chosen != kNone && f.port_up(chosen) ? 1 : 0;
  }
  EXPECT_EQ(to_down, 0);
  EXPECT_EQ(up_members, 1024);
}

// A silent failure: the link stays up and chosen, and drops everything.
// Frames sent on it are lost and counted; nobody is told.
TEST(FabricEvents, AGrayLinkDropsEverythingItCarriesSilently) {
  ExperimentConfig c = small_fat_tree();
  Experiment x(c);
  for (const FlowSpec& f : permutation(16, 1 << 20, 3)) x.add_flow(f);
  Fabric& f = x.fabric();
  const int port = x.topology().core_links[0];
  f.at(20'000, [&] { f.set_port_loss(port, 1.0); });
  x.run(50'000'000);
  EXPECT_TRUE(f.port_up(port));
  const PortStats& st = f.port_stats(port);
  EXPECT_GT(st.dropped_loss, 0u);
  EXPECT_EQ(st.dropped_down, 0u);
  EXPECT_EQ(x.fabric().stats().bytes_lost > 0, true);
}

// The per-entropy series (braid_fabric --entropy-series): with adaptive
// path selection the entropies whose path crosses a link that silently drops
// everything carry nothing but probes from 200 us after the failure (the
// issue's goal); oblivious spraying keeps feeding them. Packets on them are counted
// from the series itself, which this also checks against the connection.
namespace {
struct DeadLinkShare {
  // Packets on the dead entropies, and on all, before the failure and from
  // 200 us after it.
  uint64_t before = 0, after = 0, all_before = 0, all_after = 0;
  size_t dead = 0;
  bool all_ok = true;
  double share_before() const { return static_cast<double>(before) / all_before; }
  double share_after() const { return static_cast<double>(after) / all_after; }
};
DeadLinkShare run_gray_with_series(const std::string& profile) {
  ExperimentConfig c = small_fat_tree(profile);
  Experiment x(c);
  for (const FlowSpec& f : permutation(16, 4 << 20, 3)) x.add_flow(f);
  std::vector<size_t> all(16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  x.watch_entropies(all);
  x.sample_every(10'000, {});
  Fabric& f = x.fabric();
  const int port = x.topology().core_links[0];
  constexpr TimeNs kFail = 50'000, kGrace = 200'000;
  f.at(kFail, [&] { f.set_port_loss(port, 1.0); });
  DeadLinkShare out;
  out.all_ok = x.run(10'000'000'000);
  for (const FlowResult& r : x.results()) out.all_ok &= r.ok;
  // The dead entropies: those whose path took the port when it failed.
  const auto& smp = x.samples();
  std::set<std::pair<uint32_t, uint16_t>> dead;
  size_t at_fail = 0;
  while (at_fail < smp.size() && smp[at_fail].at < kFail) ++at_fail;
  if (at_fail == smp.size()) return out;
  for (const auto& e : smp[at_fail].entropies) {
    if (std::find(e.ports.begin(), e.ports.end(), port) != e.ports.end()) {
      dead.insert({e.flow, e.index});
    }
  }
  out.dead = dead.size();
  auto sent_on_dead = [&](const Experiment::Sample& s) {
    uint64_t n = 0;
    for (const auto& e : s.entropies) n += dead.count({e.flow, e.index}) ? e.sent : 0;
    return n;
  };
  auto sent = [](const Experiment::Sample& s) {
    uint64_t n = 0;
    for (const auto& e : s.entropies) n += e.sent;
    return n;
  };
  // From the first sample to the failure, and from 200 us after it to the
  // last sample with a flow still sending.
  size_t from = at_fail;
  while (from < smp.size() && smp[from].at < kFail + kGrace) ++from;
  size_t last = smp.size() - 1;
  while (last > from && sent(smp[last]) == sent(smp[last - 1])) --last;
  if (from >= last) return out;
  out.before = sent_on_dead(smp[at_fail]) - sent_on_dead(smp[0]);
  out.all_before = sent(smp[at_fail]) - sent(smp[0]);
  out.after = sent_on_dead(smp[last]) - sent_on_dead(smp[from]);
  out.all_after = sent(smp[last]) - sent(smp[from]);
  // The series' counters are the connections' own: every data packet sent
  // is on some entropy.
  const uint64_t series_total = sent(smp.back());
  uint64_t conn_total = 0;
  for (const FlowResult& r : x.results()) conn_total += r.sender.data_sent + r.sender.retransmits;
  EXPECT_EQ(series_total, conn_total);
  return out;
}
}  // namespace

TEST(FabricEntropySeries, ASilentlyFailedLinksEntropiesAreAbandonedWithin200Us) {
  const DeadLinkShare reps = run_gray_with_series("nscc-reps");
  EXPECT_TRUE(reps.all_ok);
  ASSERT_GT(reps.dead, 0u);
  ASSERT_GT(reps.before, 0u);
  ASSERT_GT(reps.all_after, 0u);
  // Only probes, which revive a path that heals (at most two per dead
  // entropy, the probe interval doubling); their share a fraction of before.
  EXPECT_LE(reps.after, 2 * reps.dead);
  EXPECT_LT(reps.share_after(), 0.25 * reps.share_before())
      << reps.dead << " dead entropies carried " << reps.before << " of " << reps.all_before
      << " packets before the failure, " << reps.after << " of " << reps.all_after
      << " from 200 us after it";
  // The measure sees the difference: oblivious spraying keeps its share.
  const DeadLinkShare rr = run_gray_with_series("braid");
  ASSERT_GT(rr.before, 0u);
  ASSERT_GT(rr.all_after, 0u);
  EXPECT_GT(rr.share_after(), 0.5 * rr.share_before())
      << rr.dead << " dead entropies carried " << rr.before << " of " << rr.all_before
      << " packets before the failure, " << rr.after << " of " << rr.all_after
      << " from 200 us after it";
}

// A lossless fabric: an incast and a permutation at once with queues far
// smaller than the offered load drop nothing; switches pause their senders
// (hosts included) and every flow completes intact.
TEST(FabricPfc, NeverDropsAndPausesTheSenders) {
  ExperimentConfig c = small_fat_tree("pfc", false);
  c.topo.sw.pfc = true;
  c.topo.sw.buffer_bytes = 40'000;  // what a lossy port would drop beyond
  c.topo.sw.pfc_xoff_bytes = 20'000;
  c.topo.sw.pfc_xon_bytes = 20'000 - 2 * 4224;
  c.topo.sw.ecn_kmin_bytes = 0;
  c.verify = true;
  Experiment x(c);
  for (const FlowSpec& f : incast(16, 12, 0, 256 * 1024)) x.add_flow(f);
  ASSERT_TRUE(x.run(1'000'000'000));
  for (const FlowResult& r : x.results()) {
    EXPECT_TRUE(r.ok);
    EXPECT_TRUE(r.data_ok);
    EXPECT_EQ(r.sender.retransmits, 0u);
  }
  const FabricStats& fs = x.fabric().stats();
  EXPECT_EQ(fs.dropped, 0u);
  EXPECT_EQ(fs.trimmed, 0u);
  EXPECT_GT(fs.pauses, 0u);
  EXPECT_GT(fs.paused_ns, 0u);
  // Some senders' own NICs were paused.
  uint64_t host_pauses = 0;
  for (int h = 0; h < x.hosts(); ++h)
    host_pauses += x.fabric().port_stats(x.fabric().host_port(h)).pauses;
  EXPECT_GT(host_pauses, 0u);
}

// A step that fails (its sender's link drops everything) fails every step
// that waits for it, directly or not: they never start, they are reported
// flushed, and the run ends instead of waiting forever.
TEST(FabricWorkloads, AFailedStepFlushesEverythingThatWaitsForIt) {
  ExperimentConfig c = small_fat_tree("single-path");
  Experiment x(c);
  for (const FlowSpec& f : ring_allreduce(16, 16 * 16 * 1024)) x.add_flow(f);
  x.fabric().set_port_loss(x.fabric().host_port(5), 1.0);
  ASSERT_TRUE(x.run(10'000'000'000));  // every flow ended
  size_t retry = 0, flushed = 0, ok = 0;
  for (const FlowResult& r : x.results()) {
    ASSERT_NE(r.end, kNever);
    if (r.ok) {
      ++ok;
    } else if (r.status == WcStatus::kRetryExcErr) {
      // Rank 5 sends nothing (its data and its ACKs are lost).
      ++retry;
      EXPECT_TRUE(r.spec.src == 5 || r.spec.dst == 5);
    } else {
      EXPECT_EQ(r.status, WcStatus::kWrFlushErr);
      // Never started, or posted on a connection of rank 5's already in error.
      EXPECT_TRUE(r.started == kNever || r.spec.src == 5 || r.spec.dst == 5);
      ++flushed;
    }
  }
  EXPECT_GE(retry, 1u);
  EXPECT_GT(flushed, 100u);
  EXPECT_GT(ok, 0u);
}

// Two planes: every host has a NIC port on each; a connection's 64
// entropies spread its packets over both planes (within a binomial bound of
// half each), one entropy keeps it on one; bytes arrive intact either way.
TEST(FabricPlanes, EntropiesSpreadAConnectionOverThePlanes) {
  for (const char* profile : {"braid", "single-path"}) {
    ExperimentConfig c = small_fat_tree(profile);
    c.topo.planes = 2;
    c.verify = true;
    Experiment x(c);
    EXPECT_EQ(x.topology().edges.size(), 16u);
    EXPECT_EQ(x.fabric().port_count(), 2 * 2 * (16 + 16 + 16));
    x.add_flow(FlowSpec{0, 15, 4 << 20, 0});
    ASSERT_TRUE(x.run(1'000'000'000));
    ASSERT_TRUE(x.results()[0].ok);
    EXPECT_TRUE(x.results()[0].data_ok);
    const Fabric& f = x.fabric();
    std::vector<uint64_t> per_plane;
    for (int port : f.ports_of(f.node_of_host(0))) per_plane.push_back(f.port_stats(port).packets);
    ASSERT_EQ(per_plane.size(), 2u);
    const double total = static_cast<double>(per_plane[0] + per_plane[1]);
    if (std::string(profile) == "braid") {
      // 64 entropies hashed to 2 planes: Binomial(64, 1/2) entropies each.
      EXPECT_NEAR(per_plane[0] / total, 0.5, 4 * std::sqrt(0.25 / 64));
    } else {
      EXPECT_TRUE(per_plane[0] == 0 || per_plane[1] == 0);
    }
  }
}

// Per-packet adaptive routing: one single-entropy flow from a leaf whose
// uplinks run at half the host's rate. ECMP pins it to one uplink; with
// adaptive routing its packets take the shortest queue and use both.
TEST(FabricAdaptiveRouting, PacketsTakeTheShortestQueueOfTheirGroup) {
  for (bool adaptive : {false, true}) {
    ExperimentConfig c;
    c.profile = profile_named("single-path");
    c.topo.kind = TopologyConfig::Kind::kLeafSpine;
    c.topo.leaves = 2;
    c.topo.spines = 2;
    c.topo.hosts_per_leaf = 2;
    c.topo.fabric_link.gbps = 50;
    c.topo.sw.buffer_bytes = 1u << 20;
    c.topo.sw.adaptive_routing = adaptive;
    c.verify = true;
    Experiment x(c);
    x.add_flow(FlowSpec{0, 2, 1 << 20, 0});
    ASSERT_TRUE(x.run(1'000'000'000));
    EXPECT_TRUE(x.results()[0].ok && x.results()[0].data_ok);
    const Fabric& f = x.fabric();
    const int leaf = x.topology().host_edge[0];
    int used = 0;
    for (int port : f.ports_of(leaf)) {
      const int peer = f.port_peer(port);
      if (peer == f.node_of_host(0) || peer == f.node_of_host(1)) continue;  // down to hosts
      used += f.port_stats(port).packets > 0 ? 1 : 0;
    }
    EXPECT_EQ(used, adaptive ? 2 : 1) << (adaptive ? "adaptive" : "ECMP");
  }
}

// Receiver-driven credit in a 15:1 incast: the receiver grants its link in
// turns, so every sender gets the same share (REPS and NSCC alone leave it
// to each sender's window) and, once the speculative first round trip has
// drained, the queue before the receiver stays low instead of standing at
// the ECN threshold. Every byte arrives intact.
TEST(FabricCredit, AnIncastUnderCreditSharesFairlyWithALowQueue) {
  struct Outcome {
    double jain = 0;
    uint64_t median_queue = 0;
    uint64_t trims_after_start = 0;
  };
  auto run = [](const std::string& profile) {
    ExperimentConfig c = small_fat_tree(profile);
    c.verify = true;
    Experiment x(c);
    for (const FlowSpec& f : incast(16, 15, 0, 512 * 1024)) x.add_flow(f);
    const Fabric& f = x.fabric();
    const int port = f.port_between(x.topology().host_edge[0], f.node_of_host(0));
    x.sample_every(2'000, {port});
    // The first 50 us: speculation and the windows' first round trips.
    EXPECT_FALSE(x.run(50'000));
    const uint64_t trimmed_at_start = x.fabric().stats().trimmed;
    EXPECT_TRUE(x.run(1'000'000'000)) << profile;
    Outcome o;
    for (const FlowResult& r : x.results()) {
      EXPECT_TRUE(r.ok) << profile;
      EXPECT_TRUE(r.data_ok) << profile;
    }
    o.jain = x.summarize(0).jain;
    std::vector<uint64_t> q;
    for (const auto& s : x.samples()) {
      if (s.at > 50'000) q.push_back(s.queue_bytes[0]);
    }
    EXPECT_GT(q.size(), 20u);
    std::sort(q.begin(), q.end());
    o.median_queue = q[q.size() / 2];
    o.trims_after_start = x.fabric().stats().trimmed - trimmed_at_start;
    return o;
  };
  const Outcome credit = run("credit");
  const Outcome nscc = run("nscc-reps");
  EXPECT_GE(credit.jain, 0.99);
  // Trims after the start come from the speculative round trip still
  // draining (8 against 72 when written).
  EXPECT_LT(credit.trims_after_start * 4, nscc.trims_after_start);
  const ExperimentConfig c = small_fat_tree();
  const double bdp = static_cast<double>(base_rtt_ns(c.topo, c.profile)) * 100.0 / 8.0;
  EXPECT_LT(static_cast<double>(credit.median_queue), 0.2 * bdp);  // below ECN's threshold
  EXPECT_LT(credit.median_queue * 4, nscc.median_queue);  // 12.6 against 142.6 KB when written
  EXPECT_GT(credit.jain, nscc.jain);                      // .996 against .983
}

}  // namespace
}  // namespace braid::fabric

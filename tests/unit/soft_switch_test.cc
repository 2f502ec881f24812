// The software switch (sim/switch): learning, ECMP over core links,
// rates, WRED marking, trimming, loss and link failures, in virtual time.
#include "switch/soft_switch.h"

#include <gtest/gtest.h>

#include <vector>

#include "model/class_queue.h"
#include "model/switch_rules.h"
#include "wire/byte_order.h"
#include "wire/frame.h"

namespace braid::sw {
namespace {

using Frame = std::vector<uint8_t>;

// Host h has MAC 02:00:00:00:00:h and IP 198.18.0.h.
Frame udp_frame(uint8_t from, uint8_t to, uint16_t src_port, uint32_t len,
                uint8_t tos = wire::kEcnEct0) {
  Frame f(len, 0);
  const uint8_t dst_mac[6] = {2, 0, 0, 0, 0, to};
  const uint8_t src_mac[6] = {2, 0, 0, 0, 0, from};
  std::copy(dst_mac, dst_mac + 6, f.begin());
  std::copy(src_mac, src_mac + 6, f.begin() + 6);
  wire::store_be16(f.data() + 12, 0x0800);
  uint8_t* ip = f.data() + model::kIpOff;
  ip[0] = 0x45;
  ip[1] = tos;
  wire::store_be16(ip + 2, static_cast<uint16_t>(len - wire::kEthernetSize));
  ip[8] = 64;
  ip[9] = 17;
  wire::store_be32(ip + 12, 0xc6120000u | from);
  wire::store_be32(ip + 16, 0xc6120000u | to);
  wire::store_be16(ip + 10, wire::ipv4_checksum(ip, wire::kIpv4Size));
  uint8_t* udp = f.data() + model::kUdpOff;
  wire::store_be16(udp, src_port);
  wire::store_be16(udp + 2, wire::kUetUdpPort);
  wire::store_be16(udp + 4, static_cast<uint16_t>(len - model::kUdpOff));
  return f;
}

Frame broadcast_from(uint8_t from) {
  Frame f = udp_frame(from, 0, 1, 64);
  std::fill(f.begin(), f.begin() + 6, 0xff);
  wire::store_be16(f.data() + 12, 0x0806);  // ARP
  return f;
}

std::vector<Frame> drain(SoftSwitch& s, uint16_t port, TimeNs now) {
  s.advance(now);
  std::vector<Frame> out;
  Frame buf(2048);
  uint32_t n;
  while ((n = s.transmit(port, buf.data(), static_cast<uint32_t>(buf.size()), now)) > 0) {
    out.emplace_back(buf.begin(), buf.begin() + n);
  }
  return out;
}

// Every host announces itself at time 0: the switch learns where each MAC
// is. The tests that follow start at kStart, the announcements gone.
constexpr TimeNs kStart = 1'000'000;
void learn(SoftSwitch& s, uint8_t hosts) {
  for (uint8_t h = 1; h <= hosts; ++h) {
    const Frame b = broadcast_from(h);
    s.receive(h - 1, b.data(), static_cast<uint32_t>(b.size()), 0);
  }
  for (uint16_t p = 0; p < hosts; ++p) ASSERT_EQ(drain(s, p, kStart).size(), hosts - 1u);
}

TEST(SoftSwitch, FloodsUntilItLearnsThenForwardsToOnePort) {
  SoftSwitchConfig c;
  c.ports = 3;
  SoftSwitch s(c);
  const Frame b = broadcast_from(1);
  s.receive(0, b.data(), static_cast<uint32_t>(b.size()), 0);
  EXPECT_EQ(drain(s, 0, 0).size(), 0u);
  EXPECT_EQ(drain(s, 1, 0).size(), 1u);
  EXPECT_EQ(drain(s, 2, 0).size(), 1u);
  // Host 2 is unknown yet: flooded. Once it has spoken, only its port.
  Frame f = udp_frame(1, 2, 50000, 200);
  s.receive(0, f.data(), 200, 0);
  EXPECT_EQ(drain(s, 1, 0).size(), 1u);
  EXPECT_EQ(drain(s, 2, 0).size(), 1u);
  const Frame b2 = broadcast_from(2);
  s.receive(1, b2.data(), static_cast<uint32_t>(b2.size()), 0);
  drain(s, 0, 0);
  drain(s, 2, 0);
  s.receive(0, f.data(), 200, 0);
  const auto got = drain(s, 1, 0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], f);
  EXPECT_EQ(drain(s, 2, 0).size(), 0u);
  EXPECT_EQ(s.stats().flooded, 3u);  // two broadcasts and the unknown destination
  // Back to the port it came from: refused.
  Frame self = udp_frame(2, 1, 50000, 200);
  s.receive(0, self.data(), 200, 0);
  EXPECT_EQ(s.stats().refused, 1u);
}

TEST(SoftSwitch, EachEntropyKeepsToOneCoreLinkAndEntropiesSpreadOverAll) {
  SoftSwitchConfig c;
  c.core_links = 4;
  SoftSwitch s(c);
  learn(s, 2);
  std::vector<uint64_t> per_link(4);
  for (uint16_t e = 0; e < 256; ++e) {
    const Frame f = udp_frame(1, 2, static_cast<uint16_t>(49152 + e), 128);
    const uint16_t link = s.core_link_of(f.data());
    for (int i = 0; i < 3; ++i) {
      s.receive(0, f.data(), 128, 0);
      EXPECT_EQ(s.core_link_of(f.data()), link);
    }
    ++per_link[link];
  }
  EXPECT_EQ(drain(s, 1, 0).size(), 3u * 256);
  for (uint16_t k = 0; k < 4; ++k) {
    EXPECT_GT(per_link[k], 256u / 4 / 2) << k;  // no link starved
    EXPECT_EQ(s.core_stats(k, Dir::kToHigher).packets, per_link[k] * 3) << k;
    EXPECT_EQ(s.core_stats(k, Dir::kToLower).packets, 0u) << k;
    EXPECT_EQ(s.core_flows(k, Dir::kToHigher), per_link[k]) << k;
  }
}

TEST(SoftSwitch, ACoreLinkIsFullDuplex) {
  SoftSwitchConfig c;
  c.core_links = 1;
  c.core.rate_mbps = 1000;  // 1250 B in 10 us
  SoftSwitch s(c);
  learn(s, 2);
  const TimeNs t = kStart;
  const Frame data = udp_frame(2, 1, 50000, 1250);
  const Frame ack = udp_frame(1, 2, 50000, 125, static_cast<uint8_t>(wire::kDscpAck << 2));
  // Ten data frames one way and ten ACKs the other, at once: the data
  // leaves at the link's rate, the ACKs are not queued behind it (nor it
  // behind them, although they are in the priority class).
  for (int i = 0; i < 10; ++i) {
    s.receive(1, data.data(), 1250, t);
    s.receive(0, ack.data(), 125, t);
  }
  EXPECT_EQ(drain(s, 1, t + 10 * 1'000).size(), 10u);  // ACKs: 1 us each
  EXPECT_EQ(drain(s, 0, t + 99'999).size(), 9u);
  EXPECT_EQ(drain(s, 0, t + 100'000).size(), 1u);
  EXPECT_EQ(s.core_stats(0, Dir::kToLower).data_packets, 10u);
  EXPECT_EQ(s.core_stats(0, Dir::kToHigher).packets, 10u);
  EXPECT_EQ(s.core_stats(0, Dir::kToHigher).data_packets, 0u);
}

TEST(SoftSwitch, PortsBehindOneHostLinkShareItsRate) {
  SoftSwitchConfig c;
  c.ports = 3;
  c.egress.rate_mbps = 1000;  // 1250 B in 10 us
  c.host_links = {{1, 2}};    // hosts 2 and 3 are one host's two ports
  SoftSwitch s(c);
  learn(s, 3);
  const TimeNs t = kStart;
  const Frame to2 = udp_frame(1, 2, 50000, 1250);
  const Frame to3 = udp_frame(1, 3, 50000, 1250);
  for (int i = 0; i < 5; ++i) {
    s.receive(0, to2.data(), 1250, t);
    s.receive(0, to3.data(), 1250, t);
  }
  // Ten frames through one 1 Gb/s link: 100 us, whichever port they go to.
  EXPECT_EQ(drain(s, 1, t + 49'999).size() + drain(s, 2, t + 49'999).size(), 4u);
  EXPECT_EQ(drain(s, 1, t + 100'000).size() + drain(s, 2, t + 100'000).size(), 6u);
  ASSERT_EQ(s.host_links(), 1u);
  EXPECT_EQ(s.host_link_stats(0).data_packets, 10u);
  EXPECT_EQ(s.host_link_stats(0).data_bytes, 12'500u);
  EXPECT_EQ(s.host_link_stats(0).last_data_at - s.host_link_stats(0).first_data_at, 90'000);
  EXPECT_EQ(s.delivered_from(0), 12'500u);
  // Port 0 is behind a link of its own.
  const Frame back = udp_frame(2, 1, 50000, 1250);
  s.receive(1, back.data(), 1250, t + 200'000);
  EXPECT_EQ(drain(s, 0, t + 209'999).size(), 0u);
  EXPECT_EQ(drain(s, 0, t + 210'000).size(), 1u);
}

TEST(SoftSwitch, AnUplinkPacesWhatAHostSends) {
  SoftSwitchConfig c;
  c.uplink_rate_mbps = 1000;  // 1250 B in 10 us
  SoftSwitch s(c);
  learn(s, 2);
  const TimeNs t = kStart;
  const Frame f = udp_frame(1, 2, 50000, 1250);
  for (int i = 0; i < 10; ++i) s.receive(0, f.data(), 1250, t);  // a burst at memory speed
  EXPECT_EQ(drain(s, 1, t + 9'999).size(), 0u);
  EXPECT_EQ(drain(s, 1, t + 50'000).size(), 5u);
  EXPECT_EQ(drain(s, 1, t + 100'000).size(), 5u);
  EXPECT_EQ(s.uplink_stats(0).data_packets, 10u);
  EXPECT_EQ(
      s.core_stats(0, Dir::kToHigher).data_packets + s.core_stats(1, Dir::kToHigher).data_packets,
      10u);
}

TEST(SoftSwitch, ARateLimitSerialisesFramesAtThatRate) {
  SoftSwitchConfig c;
  c.egress.rate_mbps = 1000;  // 1250 B in 10 us
  SoftSwitch s(c);
  learn(s, 2);
  const TimeNs t = kStart;
  const Frame f = udp_frame(1, 2, 50000, 1250);
  for (int i = 0; i < 10; ++i) s.receive(0, f.data(), 1250, t);
  s.advance(t);  // across the core link (no limit there)
  EXPECT_EQ(s.next_due(), t + 10'000);
  EXPECT_EQ(drain(s, 1, t + 9'999).size(), 0u);
  EXPECT_EQ(drain(s, 1, t + 10'000).size(), 1u);
  EXPECT_EQ(drain(s, 1, t + 45'000).size(), 3u);  // at 20, 30 and 40 us
  EXPECT_EQ(drain(s, 1, t + 1'000'000).size(), 6u);
  EXPECT_EQ(s.next_due(), kNever);
  // Idle, then one frame: it takes its own serialisation time, no more.
  s.receive(0, f.data(), 1250, t + 2'000'000);
  EXPECT_EQ(drain(s, 1, t + 2'009'999).size(), 0u);
  EXPECT_EQ(drain(s, 1, t + 2'010'000).size(), 1u);
}

TEST(SoftSwitch, WredMarksEcnCapableDataAboveKminAndNeverControl) {
  SoftSwitchConfig c;
  c.egress.rate_mbps = 1000;
  c.egress.ecn_kmin_bytes = 10'000;
  c.egress.ecn_kmax_bytes = 20'000;
  c.egress.ecn_pmax = 1.0;
  SoftSwitch s(c);
  learn(s, 2);
  const Frame ect = udp_frame(1, 2, 50000, 1000);
  const Frame not_ect = udp_frame(1, 2, 50000, 1000, wire::kEcnNotEct);
  const Frame ack = udp_frame(1, 2, 50000, 100, static_cast<uint8_t>(wire::kDscpAck << 2 | 1));
  for (int i = 0; i < 30; ++i) s.receive(0, ect.data(), 1000, kStart);  // 30 KB queued
  for (int i = 0; i < 5; ++i) s.receive(0, not_ect.data(), 1000, kStart);
  s.receive(0, ack.data(), 100, kStart);
  const auto out = drain(s, 1, kNever - 1);
  ASSERT_EQ(out.size(), 36u);
  // Strict priority: the ACK first, unmarked.
  EXPECT_EQ(out[0].size(), 100u);
  EXPECT_EQ(out[0][model::kIpOff + 1] & 3, 1);
  int marked = 0;
  for (size_t i = 1; i < out.size(); ++i) {
    const uint8_t ecn = out[i][model::kIpOff + 1] & 3;
    if (i <= 10) {
      EXPECT_EQ(ecn, wire::kEcnEct0) << i;  // met < 10 KB
    } else if (i > 20 && i <= 30) {
      EXPECT_EQ(ecn, wire::kEcnCe) << i;  // met >= 20 KB
    } else if (i > 30) {
      EXPECT_EQ(ecn, wire::kEcnNotEct) << i;
    }
    marked += ecn == wire::kEcnCe;
    // Still a valid IPv4 header.
    EXPECT_EQ(wire::ipv4_checksum(out[i].data() + model::kIpOff, wire::kIpv4Size), 0u) << i;
  }
  EXPECT_EQ(static_cast<uint64_t>(marked), s.egress_stats(1).ecn_marked);
  EXPECT_GT(marked, 10);
  EXPECT_LT(marked, 21);
}

TEST(SoftSwitch, AFullQueueTrimsToTheHeadersOrDrops) {
  for (const bool trim : {true, false}) {
    SoftSwitchConfig c;
    c.egress.rate_mbps = 1000;
    c.egress.buffer_bytes = 5'000;
    c.egress.trim = trim;
    SoftSwitch s(c);
    learn(s, 2);
    const Frame f = udp_frame(1, 2, 50000, 1000);
    for (int i = 0; i < 8; ++i) s.receive(0, f.data(), 1000, kStart);
    const auto out = drain(s, 1, kNever - 1);
    if (!trim) {
      EXPECT_EQ(out.size(), 5u);
      EXPECT_EQ(s.egress_stats(1).dropped, 3u);
      continue;
    }
    ASSERT_EQ(out.size(), 8u);
    EXPECT_EQ(s.egress_stats(1).trimmed, 3u);
    // The trimmed headers go first, in the priority class.
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(out[i].size(), c.trimmed_bytes);
      const uint8_t* ip = out[i].data() + model::kIpOff;
      EXPECT_EQ(ip[1] >> 2, c.trim_dscp);
      EXPECT_EQ(wire::load_be16(ip + 2), c.trimmed_bytes - wire::kEthernetSize);
      EXPECT_EQ(wire::load_be16(out[i].data() + model::kUdpOff + 4),
                c.trimmed_bytes - model::kUdpOff);
      EXPECT_EQ(wire::ipv4_checksum(ip, wire::kIpv4Size), 0u);
    }
    for (int i = 3; i < 8; ++i) EXPECT_EQ(out[i].size(), 1000u);
  }
}

TEST(SoftSwitch, ADownLinkIsRoutedAroundAndABlackholedOneSwallowsItsShare) {
  SoftSwitchConfig c;
  c.core_links = 2;
  SoftSwitch s(c);
  learn(s, 2);
  // Entropies the hash puts on link 1.
  std::vector<Frame> on1;
  for (uint16_t e = 0; on1.size() < 8; ++e) {
    Frame f = udp_frame(1, 2, static_cast<uint16_t>(49152 + e), 128);
    if (s.core_link_of(f.data()) == 1) on1.push_back(std::move(f));
  }
  s.set_link_state(1, LinkState::kBlackhole);
  for (const Frame& f : on1) s.receive(0, f.data(), 128, 0);
  EXPECT_EQ(drain(s, 1, 0).size(), 0u);
  EXPECT_EQ(s.core_stats(1, Dir::kToHigher).dropped, 8u);
  s.set_link_state(1, LinkState::kDown);
  for (const Frame& f : on1) {
    EXPECT_EQ(s.core_link_of(f.data()), 0);
    s.receive(0, f.data(), 128, 0);
  }
  EXPECT_EQ(drain(s, 1, 0).size(), 8u);
  s.set_link_state(1, LinkState::kUp);
  EXPECT_EQ(s.core_link_of(on1[0].data()), 1);
}

TEST(SoftSwitch, LossDropsAboutItsShareOfDataAndNoControl) {
  SoftSwitchConfig c;
  c.core.loss = 0.25;
  SoftSwitch s(c);
  learn(s, 2);
  const Frame data = udp_frame(1, 2, 50000, 500);
  const Frame ack = udp_frame(1, 2, 50000, 100, static_cast<uint8_t>(wire::kDscpAck << 2));
  std::vector<Frame> out;
  for (int i = 0; i < 4000; ++i) {
    s.receive(0, data.data(), 500, kStart);
    s.receive(0, ack.data(), 100, kStart);
    for (Frame& f : drain(s, 1, kStart)) out.push_back(std::move(f));
  }
  uint64_t acks = 0;
  for (const Frame& f : out) acks += f.size() == 100;
  EXPECT_EQ(acks, 4000u);
  const uint64_t dropped =
      s.core_stats(0, Dir::kToHigher).dropped + s.core_stats(1, Dir::kToHigher).dropped;
  EXPECT_GT(dropped, 800u);
  EXPECT_LT(dropped, 1200u);
  EXPECT_EQ(out.size(), 8000u - dropped);
}

// The queue discipline every modelled switch port uses (model/class_queue.h).
TEST(ClassQueue, EachClassHasItsBufferAndAFullDataClassTrimsOrDrops) {
  using model::ClassQueue;
  using V = ClassQueue::Verdict;
  std::vector<uint32_t> next(16);
  ClassQueue q;
  const uint64_t buffer = 10000;
  for (uint32_t s = 0; s < 2; ++s) {
    ASSERT_EQ(q.admit(false, 4000, buffer, true, 100), V::kData);
    q.append(s, 4000, false, next.data());
  }
  EXPECT_EQ(q.data_bytes(), 8000u);
  // The data class is full for 4000 more: trimmed (its headers fit the
  // priority class), or dropped without trimming; lossless takes it.
  EXPECT_EQ(q.admit(false, 4000, buffer, true, 100), V::kTrim);
  EXPECT_EQ(q.admit(false, 4000, buffer, false, 100), V::kDrop);
  EXPECT_EQ(q.admit(false, 4000, buffer, true, 100, true), V::kData);
  EXPECT_EQ(q.admit(false, 80, buffer, true, 100), V::kData);  // still fits
  // A frame no longer than the trimmed size is not trimmed: dropped.
  EXPECT_EQ(q.admit(false, 2100, buffer, true, 2100), V::kDrop);
  // Control has a buffer of its own: data does not crowd it out.
  ASSERT_EQ(q.admit(true, 9000, buffer, true, 100), V::kPriority);
  q.append(2, 9000, true, next.data());
  EXPECT_EQ(q.admit(true, 2000, buffer, true, 100), V::kDrop);  // nor is it ever trimmed
  // Trimmed headers that no longer fit the priority class: dropped.
  EXPECT_EQ(q.admit(false, 4000, buffer, true, 1001), V::kDrop);
  EXPECT_EQ(q.admit(false, 4000, buffer, true, 1000), V::kTrim);
  EXPECT_EQ(q.queued_bytes(), 17000u);
  EXPECT_EQ(q.priority_bytes(), 9000u);
}

TEST(ClassQueue, ThePriorityClassLeavesFirstAndEachClassInOrder) {
  using model::ClassQueue;
  std::vector<uint32_t> next(16);
  ClassQueue q;
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(q.data_at_most_one());
  for (uint32_t s : {3u, 4u, 5u}) q.append(s, 100, false, next.data());
  q.append(7, 10, true, next.data());
  q.append(8, 10, true, next.data());
  EXPECT_FALSE(q.data_at_most_one());
  std::vector<uint32_t> order;
  bool priority = false;
  for (uint32_t s = q.head(&priority); s != ClassQueue::kNil; s = q.head(&priority)) {
    order.push_back(s);
    q.pop(priority, priority ? 10 : 100, next.data());
  }
  EXPECT_EQ(order, (std::vector<uint32_t>{7, 8, 3, 4, 5}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.queued_bytes(), 0u);
  // Emptied at once (a link going down): every frame given back, in order.
  q.append(1, 100, false, next.data());
  q.append(2, 10, true, next.data());
  std::vector<uint32_t> dropped;
  q.clear(next.data(), [&](uint32_t s) { dropped.push_back(s); });
  EXPECT_EQ(dropped, (std::vector<uint32_t>{2, 1}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.queued_bytes(), 0u);
}

}  // namespace
}  // namespace braid::sw

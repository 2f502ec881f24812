// Unit tests for lib/net/arp: the frames are compared byte for byte with
// references written out by hand below, every malformed input is rejected
// with its reason, the responder answers only requests for our address, and
// the neighbour table learns, refuses to override static entries, expires,
// retries, gives up, refreshes what is in use and survives being full. A
// randomized run checks the hash table against a std::map.
//
// Buffers handed to the parser are heap blocks of exactly the given length,
// so an over-read is an ASan error rather than a silent pass.

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "net/arp.h"

namespace braid::net {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint32_t ipv4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return a << 24 | b << 16 | c << 8 | d;
}

constexpr TimeNs kSec = 1'000'000'000;

const MacAddr kOurMac = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
const MacAddr kPeerMac = {0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee};
const MacAddr kOtherMac = {0x02, 0x01, 0x02, 0x03, 0x04, 0x05};
constexpr uint32_t kOurIp = ipv4(192, 168, 1, 10);
constexpr uint32_t kPeerIp = ipv4(192, 168, 1, 20);
constexpr uint32_t kThirdIp = ipv4(192, 168, 1, 30);

// "Who has 192.168.1.20? Tell 192.168.1.10", from us.
const Bytes kRequestRef = {
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff,  // Ethernet destination: broadcast
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,  // Ethernet source: us
    0x08, 0x06,                          // EtherType ARP
    0x00, 0x01,                          // htype Ethernet
    0x08, 0x00,                          // ptype IPv4
    0x06, 0x04,                          // hlen, plen
    0x00, 0x01,                          // op request
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,  // sender MAC
    0xc0, 0xa8, 0x01, 0x0a,              // sender IP 192.168.1.10
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // target MAC: unknown
    0xc0, 0xa8, 0x01, 0x14,              // target IP 192.168.1.20
    0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  // padding to 60
};

// "192.168.1.10 is at 02:11:22:33:44:55", from us to the peer.
const Bytes kReplyRef = {
    0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,  // Ethernet destination: the peer
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,  // Ethernet source: us
    0x08, 0x06,                          // EtherType ARP
    0x00, 0x01, 0x08, 0x00, 0x06, 0x04,  // Ethernet/IPv4, 6/4
    0x00, 0x02,                          // op reply
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55,  // sender MAC: us
    0xc0, 0xa8, 0x01, 0x0a,              // sender IP 192.168.1.10
    0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,  // target MAC: the peer
    0xc0, 0xa8, 0x01, 0x14,              // target IP 192.168.1.20
    0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

// Gratuitous ARP for 192.168.1.10, from us.
const Bytes kGratuitousRef = {
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x11, 0x22, 0x33, 0x44,
    0x55, 0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01,  //
    0x02, 0x11, 0x22, 0x33, 0x44, 0x55, 0xc0, 0xa8, 0x01, 0x0a,        // sender: us
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0x01, 0x0a,        // target IP: us too
    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,    0,
    0,    0,    0,    0,    0,    0,    0,
};

constexpr uint8_t kSentinel = 0xee;

ArpError parse_exact(const Bytes& frame, size_t len, ArpPacket* out) {
  Bytes copy(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(len));  // exact size
  return parse_arp(copy.data(), len, out);
}

ArpError parse_exact(const Bytes& frame, ArpPacket* out) {
  return parse_exact(frame, frame.size(), out);
}

// Any ARP frame, written from its fields; the builders are checked against the
// references above, this one by round trips.
Bytes frame_of(const ArpPacket& p) {
  Bytes b(kArpFrameSize);
  EXPECT_EQ(build_arp(b.data(), b.size(), p), kArpFrameSize);
  return b;
}

ArpPacket packet(uint16_t op, const MacAddr& sender_mac, uint32_t sender_ip,
                 const MacAddr& target_mac, uint32_t target_ip) {
  ArpPacket p;
  p.eth_dst = op == kArpOpRequest ? kBroadcastMac : target_mac;
  p.eth_src = sender_mac;
  p.op = op;
  p.sender_mac = sender_mac;
  p.sender_ip = sender_ip;
  p.target_mac = target_mac;
  p.target_ip = target_ip;
  return p;
}

Bytes request_from(const MacAddr& mac, uint32_t ip, uint32_t target_ip) {
  return frame_of(packet(kArpOpRequest, mac, ip, MacAddr{}, target_ip));
}

Bytes reply_from(const MacAddr& mac, uint32_t ip, const MacAddr& to_mac, uint32_t to_ip) {
  return frame_of(packet(kArpOpReply, mac, ip, to_mac, to_ip));
}

// ---------------------------------------------------------------------------
// Wire format

TEST(ArpWire, RequestMatchesReference) {
  std::array<uint8_t, 80> buf;
  buf.fill(kSentinel);
  ASSERT_EQ(build_arp_request(buf.data(), buf.size(), kOurMac, kOurIp, kPeerIp), 60u);
  EXPECT_EQ(Bytes(buf.begin(), buf.begin() + 60), kRequestRef);
  for (size_t i = 60; i < buf.size(); ++i) EXPECT_EQ(buf[i], kSentinel) << "wrote byte " << i;
}

TEST(ArpWire, ReplyMatchesReference) {
  std::array<uint8_t, 80> buf;
  buf.fill(kSentinel);
  ASSERT_EQ(build_arp_reply(buf.data(), buf.size(), kOurMac, kOurIp, kPeerMac, kPeerIp), 60u);
  EXPECT_EQ(Bytes(buf.begin(), buf.begin() + 60), kReplyRef);
  for (size_t i = 60; i < buf.size(); ++i) EXPECT_EQ(buf[i], kSentinel) << "wrote byte " << i;
}

TEST(ArpWire, GratuitousMatchesReference) {
  std::array<uint8_t, 60> buf;
  buf.fill(kSentinel);
  ASSERT_EQ(build_gratuitous_arp(buf.data(), buf.size(), kOurMac, kOurIp), 60u);
  EXPECT_EQ(Bytes(buf.begin(), buf.end()), kGratuitousRef);
}

TEST(ArpWire, BuildersRefuseSmallBuffersWithoutWriting) {
  ArpPacket p = packet(kArpOpReply, kPeerMac, kPeerIp, kOurMac, kOurIp);
  for (size_t cap = 0; cap < kArpFrameSize; ++cap) {
    std::array<uint8_t, kArpFrameSize> buf;
    buf.fill(kSentinel);
    EXPECT_EQ(build_arp_request(buf.data(), cap, kOurMac, kOurIp, kPeerIp), 0u) << cap;
    EXPECT_EQ(build_arp_reply(buf.data(), cap, kOurMac, kOurIp, kPeerMac, kPeerIp), 0u) << cap;
    EXPECT_EQ(build_gratuitous_arp(buf.data(), cap, kOurMac, kOurIp), 0u) << cap;
    EXPECT_EQ(build_arp(buf.data(), cap, p), 0u) << cap;
    for (uint8_t b : buf) ASSERT_EQ(b, kSentinel) << "cap " << cap;
  }
}

TEST(ArpWire, ParseReferenceFrames) {
  ArpPacket p;
  ASSERT_EQ(parse_exact(kRequestRef, &p), ArpError::kNone);
  EXPECT_EQ(p.eth_dst, kBroadcastMac);
  EXPECT_EQ(p.eth_src, kOurMac);
  EXPECT_EQ(p.op, kArpOpRequest);
  EXPECT_EQ(p.sender_mac, kOurMac);
  EXPECT_EQ(p.sender_ip, kOurIp);
  EXPECT_EQ(p.target_mac, MacAddr{});
  EXPECT_EQ(p.target_ip, kPeerIp);

  ASSERT_EQ(parse_exact(kReplyRef, &p), ArpError::kNone);
  EXPECT_EQ(p.eth_dst, kPeerMac);
  EXPECT_EQ(p.eth_src, kOurMac);
  EXPECT_EQ(p.op, kArpOpReply);
  EXPECT_EQ(p.sender_mac, kOurMac);
  EXPECT_EQ(p.sender_ip, kOurIp);
  EXPECT_EQ(p.target_mac, kPeerMac);
  EXPECT_EQ(p.target_ip, kPeerIp);
}

TEST(ArpWire, RoundTrips) {
  for (const Bytes* ref : {&kRequestRef, &kReplyRef, &kGratuitousRef}) {
    ArpPacket p;
    ASSERT_EQ(parse_exact(*ref, &p), ArpError::kNone);
    EXPECT_EQ(frame_of(p), *ref);
  }
  // Every field distinct, Ethernet addresses unlike the ARP ones.
  ArpPacket p;
  p.eth_dst = {0x10, 0x11, 0x12, 0x13, 0x14, 0x15};
  p.eth_src = {0x20, 0x21, 0x22, 0x23, 0x24, 0x25};
  p.op = kArpOpReply;
  p.sender_mac = {0x30, 0x31, 0x32, 0x33, 0x34, 0x35};
  p.sender_ip = 0x40414243;
  p.target_mac = {0x50, 0x51, 0x52, 0x53, 0x54, 0x55};
  p.target_ip = 0x60616263;
  ArpPacket q;
  ASSERT_EQ(parse_exact(frame_of(p), &q), ArpError::kNone);
  EXPECT_EQ(q, p);
}

TEST(ArpWire, AcceptsMinimalAndLongerFrames) {
  ArpPacket p;
  EXPECT_EQ(parse_exact(kRequestRef, kArpHeaderSize, &p), ArpError::kNone);  // unpadded
  Bytes with_fcs = kRequestRef;
  with_fcs.insert(with_fcs.end(), {0xde, 0xad, 0xbe, 0xef});
  EXPECT_EQ(parse_exact(with_fcs, &p), ArpError::kNone);
  EXPECT_EQ(p.target_ip, kPeerIp);
}

TEST(ArpWire, EveryTruncationRejected) {
  for (const Bytes* ref : {&kRequestRef, &kReplyRef}) {
    for (size_t len = 0; len < kArpHeaderSize; ++len) {
      ArpPacket p;
      EXPECT_EQ(parse_exact(*ref, len, &p), ArpError::kTruncated) << "length " << len;
    }
  }
}

TEST(ArpWire, MalformedFieldsRejectedWithReason) {
  struct Case {
    const char* name;
    size_t offset;
    std::vector<uint8_t> bytes;
    ArpError want;
  };
  const Case cases[] = {
      {"EtherType IPv4", 12, {0x08, 0x00}, ArpError::kNotArp},
      {"EtherType VLAN", 12, {0x81, 0x00}, ArpError::kNotArp},
      {"EtherType RARP", 12, {0x80, 0x35}, ArpError::kNotArp},
      {"htype 0", 14, {0x00, 0x00}, ArpError::kNotEthernetIpv4},
      {"htype IEEE 802", 14, {0x00, 0x06}, ArpError::kNotEthernetIpv4},
      {"htype 0x0101", 14, {0x01, 0x01}, ArpError::kNotEthernetIpv4},
      {"ptype IPv6", 16, {0x86, 0xdd}, ArpError::kNotEthernetIpv4},
      {"ptype 0x0008", 16, {0x00, 0x08}, ArpError::kNotEthernetIpv4},
      {"hlen 8", 18, {0x08}, ArpError::kBadAddressLength},
      {"hlen 0", 18, {0x00}, ArpError::kBadAddressLength},
      {"plen 16", 19, {0x10}, ArpError::kBadAddressLength},
      {"plen 0", 19, {0x00}, ArpError::kBadAddressLength},
      {"op 0", 20, {0x00, 0x00}, ArpError::kUnknownOpcode},
      {"op 3 (RARP request)", 20, {0x00, 0x03}, ArpError::kUnknownOpcode},
      {"op 8 (InARP request)", 20, {0x00, 0x08}, ArpError::kUnknownOpcode},
      {"op 0x0100", 20, {0x01, 0x00}, ArpError::kUnknownOpcode},
      {"op 0x0201", 20, {0x02, 0x01}, ArpError::kUnknownOpcode},
      {"op 0xffff", 20, {0xff, 0xff}, ArpError::kUnknownOpcode},
  };
  for (const Case& c : cases) {
    Bytes f = kRequestRef;
    std::copy(c.bytes.begin(), c.bytes.end(), f.begin() + static_cast<std::ptrdiff_t>(c.offset));
    ArpPacket p;
    EXPECT_EQ(parse_exact(f, &p), c.want)
        << c.name << ": got " << arp_error_name(parse_exact(f, &p));
    // The checks come in order: a bad EtherType short of 42 bytes is not "truncated".
    if (c.want == ArpError::kNotArp) {
      EXPECT_EQ(parse_exact(f, 20, &p), ArpError::kNotArp) << c.name;
    }
  }
}

TEST(ArpWire, NamesAreDistinct) {
  std::set<std::string> names;
  for (size_t i = 0; i < static_cast<size_t>(ArpError::kCount); ++i) {
    const std::string n = arp_error_name(static_cast<ArpError>(i));
    EXPECT_NE(n, "?");
    EXPECT_TRUE(names.insert(n).second) << n;
  }
  std::set<std::string> states;
  for (NeighborState s :
       {NeighborState::kUnknown, NeighborState::kIncomplete, NeighborState::kReachable,
        NeighborState::kStatic, NeighborState::kFailed}) {
    const std::string n = neighbor_state_name(s);
    EXPECT_NE(n, "?");
    EXPECT_TRUE(states.insert(n).second) << n;
  }
}

// ---------------------------------------------------------------------------
// Responder

class ArpResponderTest : public ::testing::Test {
 protected:
  ArpResponderTest() : arp_(config()) {}

  static ArpConfig config() {
    ArpConfig c;
    c.mac = kOurMac;
    c.ip = kOurIp;
    c.neighbor.reachable_ns = 60 * kSec;
    return c;
  }

  size_t feed(const Bytes& frame, TimeNs now = 5 * kSec) {
    out_.fill(kSentinel);
    return arp_.on_frame(frame.data(), frame.size(), now, out_.data(), out_.size());
  }
  Bytes out(size_t n) const {
    return Bytes(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  // Resolves the peer at 5 s: our request, its reply (taken, not answered).
  void resolve_peer() {
    ASSERT_TRUE(arp_.resolve(kPeerIp, 5 * kSec));
    std::array<uint8_t, kArpFrameSize> req;
    ASSERT_EQ(arp_.poll(5 * kSec, req.data(), req.size()), kArpFrameSize);
    EXPECT_EQ(feed(reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp)), 0u);
    ASSERT_EQ(arp_.state(kPeerIp), NeighborState::kReachable);
  }

  Arp arp_;
  std::array<uint8_t, 128> out_{};
};

// The sender of a request is answered, not learned: a spoofed request can
// neither redirect our traffic nor take a table entry.
TEST_F(ArpResponderTest, AnswersRequestForOurIpWithoutLearningTheSender) {
  const size_t n = feed(request_from(kPeerMac, kPeerIp, kOurIp));
  ASSERT_EQ(n, kArpFrameSize);
  EXPECT_EQ(out(n), kReplyRef);
  EXPECT_EQ(out_[kArpFrameSize], kSentinel);
  EXPECT_EQ(arp_.stats().replies_sent, 1u);
  EXPECT_EQ(arp_.stats().rx_frames, 1u);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kUnknown);
  EXPECT_EQ(arp_.neighbors().size(), 0u);
  EXPECT_EQ(arp_.neighbors().stats().learned, 0u);
}

TEST_F(ArpResponderTest, IgnoresRequestsForOtherAddresses) {
  EXPECT_EQ(feed(request_from(kPeerMac, kPeerIp, kThirdIp)), 0u);
  EXPECT_EQ(feed(request_from(kPeerMac, kPeerIp, kOurIp + 1)), 0u);
  EXPECT_EQ(out_[0], kSentinel);  // nothing written
  EXPECT_EQ(arp_.stats().replies_sent, 0u);
  EXPECT_EQ(arp_.stats().ignored, 2u);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kUnknown);  // not addressed to us: not added
  EXPECT_EQ(arp_.neighbors().size(), 0u);
}

// A reply is taken only as the answer to a request of ours.
TEST_F(ArpResponderTest, RepliesAnswerOurRequestsOnly) {
  EXPECT_EQ(feed(reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp)), 0u);  // nobody asked
  EXPECT_EQ(arp_.stats().replies_sent, 0u);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kUnknown);
  EXPECT_EQ(arp_.neighbors().stats().unsolicited, 1u);
  // Asked, and answered.
  ASSERT_NO_FATAL_FAILURE(resolve_peer());
  MacAddr mac{};
  ASSERT_TRUE(arp_.lookup(kPeerIp, 6 * kSec, &mac));
  EXPECT_EQ(mac, kPeerMac);
  // A reply to someone else about a host we do not know: nothing.
  EXPECT_EQ(feed(reply_from(kOtherMac, kThirdIp, kPeerMac, kPeerIp)), 0u);
  EXPECT_EQ(arp_.state(kThirdIp), NeighborState::kUnknown);
  EXPECT_EQ(arp_.stats().ignored, 2u);
}

// ARP poisoning (issue 32): with the peer resolved, an unsolicited reply,
// a gratuitous ARP and a request "from" the peer, each naming another MAC,
// leave the mapping as it is (each one used to overwrite it).
TEST_F(ArpResponderTest, NoFrameNobodyAskedForRedirectsAResolvedPeer) {
  ASSERT_NO_FATAL_FAILURE(resolve_peer());
  std::array<uint8_t, kArpFrameSize> req;
  const Bytes garp = frame_of(packet(kArpOpRequest, kOtherMac, kPeerIp, MacAddr{}, kPeerIp));
  EXPECT_EQ(feed(garp, 7 * kSec), 0u);
  EXPECT_EQ(feed(reply_from(kOtherMac, kPeerIp, kOurMac, kOurIp), 7 * kSec), 0u);
  EXPECT_EQ(feed(request_from(kOtherMac, kPeerIp, kOurIp), 7 * kSec), kArpFrameSize);
  MacAddr mac{};
  ASSERT_TRUE(arp_.lookup(kPeerIp, 8 * kSec, &mac));
  EXPECT_EQ(mac, kPeerMac);
  EXPECT_EQ(arp_.neighbors().stats().mac_changes, 0u);
  EXPECT_EQ(arp_.neighbors().find(kPeerIp)->expires_at, 65 * kSec);  // confirmed at 5 s only
  EXPECT_EQ(arp_.stats().ignored, 2u);  // the gratuitous ARP and the unsolicited reply
  // The claims start one probe series to the MAC we hold; the peer answers.
  EXPECT_EQ(arp_.neighbors().stats().challenges, 1u);
  ASSERT_EQ(arp_.poll(8 * kSec, req.data(), req.size()), kArpFrameSize);
  feed(reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp), 8 * kSec + 5);
  for (TimeNs t = 9; t <= 12; ++t) arp_.poll(t * kSec, req.data(), req.size());
  ASSERT_TRUE(arp_.lookup(kPeerIp, 12 * kSec, &mac));
  EXPECT_EQ(mac, kPeerMac);
  EXPECT_EQ(arp_.neighbors().stats().mac_change_refused, 1u);
}

// A peer that moved to another NIC announces it (gratuitous ARP): the MAC
// we hold is probed by unicast at once, and the new one is taken when no
// probe is answered, 3 s later. Had the old MAC answered, it would stay.
TEST_F(ArpResponderTest, AnAnnouncedNewMacIsTakenOnceTheOldOneStaysSilent) {
  ASSERT_NO_FATAL_FAILURE(resolve_peer());
  std::array<uint8_t, kArpFrameSize> buf;
  const Bytes garp = frame_of(packet(kArpOpRequest, kOtherMac, kPeerIp, MacAddr{}, kPeerIp));
  EXPECT_EQ(feed(garp, 7 * kSec), 0u);
  EXPECT_EQ(arp_.neighbors().stats().challenges, 1u);
  MacAddr mac{};
  for (TimeNs s = 7; s <= 9; ++s) {
    ASSERT_EQ(arp_.poll(s * kSec, buf.data(), buf.size()), kArpFrameSize) << s;
    EXPECT_EQ(Bytes(buf.begin(), buf.end()),
              frame_of(ArpPacket{kPeerMac, kOurMac, kArpOpRequest, kOurMac, kOurIp, MacAddr{},
                                 kPeerIp}));  // unicast, to the MAC we hold
    ASSERT_TRUE(arp_.lookup(kPeerIp, s * kSec, &mac));
    EXPECT_EQ(mac, kPeerMac);
  }
  EXPECT_EQ(arp_.poll(10 * kSec, buf.data(), buf.size()), 0u);
  ASSERT_TRUE(arp_.lookup(kPeerIp, 10 * kSec, &mac));
  EXPECT_EQ(mac, kOtherMac);
  EXPECT_EQ(arp_.neighbors().stats().mac_changes, 1u);
}

TEST_F(ArpResponderTest, IgnoresOwnFramesBadSendersAndConflicts) {
  // Our own request looped back.
  EXPECT_EQ(feed(kRequestRef), 0u);
  EXPECT_EQ(arp_.stats().ignored, 1u);
  // A multicast or zero sender MAC is never learned nor answered.
  const MacAddr mcast = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};
  EXPECT_EQ(feed(request_from(mcast, kPeerIp, kOurIp)), 0u);
  EXPECT_EQ(feed(request_from(kBroadcastMac, kPeerIp, kOurIp)), 0u);
  EXPECT_EQ(feed(request_from(MacAddr{}, kPeerIp, kOurIp)), 0u);
  EXPECT_EQ(arp_.stats().bad_sender, 3u);
  // Another host claiming our address.
  EXPECT_EQ(feed(request_from(kOtherMac, kOurIp, kOurIp)), 0u);
  EXPECT_EQ(feed(reply_from(kOtherMac, kOurIp, kPeerMac, kPeerIp)), 0u);
  EXPECT_EQ(arp_.stats().address_conflicts, 2u);
  EXPECT_EQ(arp_.stats().replies_sent, 0u);
  EXPECT_EQ(arp_.neighbors().size(), 0u);
  EXPECT_EQ(out_[0], kSentinel);
}

TEST_F(ArpResponderTest, AnswersProbesWithoutLearning) {
  // RFC 5227 probe: sender IP 0.0.0.0. We defend our address.
  const size_t n = feed(request_from(kPeerMac, 0, kOurIp));
  ASSERT_EQ(n, kArpFrameSize);
  ArpPacket p;
  ASSERT_EQ(parse_exact(out(n), &p), ArpError::kNone);
  EXPECT_EQ(p, packet(kArpOpReply, kOurMac, kOurIp, kPeerMac, 0));
  EXPECT_EQ(arp_.neighbors().size(), 0u);
}

TEST_F(ArpResponderTest, CountsMalformedFramesByReason) {
  Bytes bad_op = request_from(kPeerMac, kPeerIp, kOurIp);
  bad_op[21] = 9;
  EXPECT_EQ(feed(bad_op), 0u);
  EXPECT_EQ(feed(Bytes(kRequestRef.begin(), kRequestRef.begin() + 41)), 0u);
  Bytes ipv4 = kRequestRef;
  ipv4[13] = 0x00;
  EXPECT_EQ(feed(ipv4), 0u);
  EXPECT_EQ(arp_.stats().errors_for(ArpError::kUnknownOpcode), 1u);
  EXPECT_EQ(arp_.stats().errors_for(ArpError::kTruncated), 1u);
  EXPECT_EQ(arp_.stats().errors_for(ArpError::kNotArp), 1u);
  EXPECT_EQ(arp_.stats().rx_frames, 3u);
  EXPECT_EQ(arp_.stats().replies_sent, 0u);
  EXPECT_EQ(arp_.neighbors().size(), 0u);
}

TEST_F(ArpResponderTest, ReplyBufferTooSmall) {
  const Bytes req = request_from(kPeerMac, kPeerIp, kOurIp);
  EXPECT_EQ(arp_.on_frame(req.data(), req.size(), 0, out_.data(), kArpFrameSize - 1), 0u);
  EXPECT_EQ(arp_.stats().reply_no_buffer, 1u);
  EXPECT_EQ(arp_.stats().replies_sent, 0u);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kUnknown);  // requests are not learned
}

TEST_F(ArpResponderTest, StaticEntriesAreNeverOverridden) {
  ASSERT_TRUE(arp_.neighbors().add_static(kPeerIp, kPeerMac));
  // The peer's address claimed by another MAC: answered (it asked), not learned.
  EXPECT_EQ(feed(request_from(kOtherMac, kPeerIp, kOurIp)), kArpFrameSize);
  EXPECT_EQ(feed(reply_from(kOtherMac, kPeerIp, kOurMac, kOurIp)), 0u);
  EXPECT_EQ(feed(frame_of(packet(kArpOpRequest, kOtherMac, kPeerIp, MacAddr{}, kPeerIp))), 0u);
  EXPECT_FALSE(arp_.neighbors().learn(kPeerIp, kOtherMac, 5 * kSec));
  // The reply and learn() conflict; the request and the gratuitous ARP
  // change nothing anyway.
  EXPECT_EQ(arp_.neighbors().stats().static_conflicts, 2u);
  EXPECT_EQ(arp_.stats().ignored, 2u);  // the reply and the gratuitous one
  MacAddr mac{};
  ASSERT_TRUE(arp_.lookup(kPeerIp, 0, &mac));
  EXPECT_EQ(mac, kPeerMac);
  // Static entries never expire and are never resolved.
  arp_.neighbors().expire(kNever - 1);
  ASSERT_TRUE(arp_.lookup(kPeerIp, kNever - 1, &mac));
  EXPECT_EQ(mac, kPeerMac);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kStatic);
  EXPECT_TRUE(arp_.resolve(kPeerIp, 0));
  std::array<uint8_t, kArpFrameSize> buf;
  EXPECT_EQ(arp_.poll(1000 * kSec, buf.data(), buf.size()), 0u);
  EXPECT_EQ(arp_.next_timer(), kNever);
}

TEST_F(ArpResponderTest, StaticReplacesLearned) {
  feed(reply_from(kOtherMac, kPeerIp, kOurMac, kOurIp));
  ASSERT_TRUE(arp_.neighbors().add_static(kPeerIp, kPeerMac));
  MacAddr mac{};
  ASSERT_TRUE(arp_.lookup(kPeerIp, 0, &mac));
  EXPECT_EQ(mac, kPeerMac);
  EXPECT_EQ(arp_.neighbors().size(), 1u);
  EXPECT_TRUE(arp_.neighbors().remove(kPeerIp));
  EXPECT_FALSE(arp_.lookup(kPeerIp, 0, &mac));
  EXPECT_FALSE(arp_.neighbors().remove(kPeerIp));
}

// ---------------------------------------------------------------------------
// Expiry, resolution, retries

TEST(NeighborTable, LearnedEntryExpiresAfterReachableTime) {
  NeighborConfig cfg;
  cfg.reachable_ns = 30 * kSec;
  NeighborTable t(16, cfg);
  const TimeNs t0 = 100 * kSec;
  ASSERT_TRUE(t.learn(kPeerIp, kPeerMac, t0));
  EXPECT_EQ(t.next_timer(), t0 + 30 * kSec);
  MacAddr mac{};
  EXPECT_TRUE(t.lookup(kPeerIp, t0 + 30 * kSec - 1, &mac));
  EXPECT_FALSE(t.lookup(kPeerIp, t0 + 30 * kSec, &mac));  // expired even before expire()
  t.expire(t0 + 30 * kSec - 1);
  EXPECT_EQ(t.size(), 1u);
  t.expire(t0 + 30 * kSec);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.state(kPeerIp), NeighborState::kUnknown);
  EXPECT_EQ(t.stats().expired, 1u);
  EXPECT_EQ(t.next_timer(), kNever);
}

TEST(NeighborTable, ConfirmationExtendsLifetime) {
  NeighborTable t(16);  // default: 60 s
  ASSERT_TRUE(t.learn(kPeerIp, kPeerMac, 0));
  ASSERT_TRUE(t.learn(kPeerIp, kPeerMac, 50 * kSec));
  EXPECT_EQ(t.stats().learned, 1u);
  EXPECT_EQ(t.stats().refreshed, 1u);
  t.expire(60 * kSec);
  MacAddr mac{};
  EXPECT_TRUE(t.lookup(kPeerIp, 109 * kSec, &mac));
  EXPECT_FALSE(t.lookup(kPeerIp, 110 * kSec, &mac));
}

class ArpResolveTest : public ::testing::Test {
 protected:
  ArpResolveTest() : arp_(config()) {}
  static ArpConfig config() {
    ArpConfig c;
    c.mac = kOurMac;
    c.ip = kOurIp;
    return c;  // defaults: 60 s reachable, 1 s interval, 3 requests
  }
  size_t poll(TimeNs now) {
    buf_.fill(kSentinel);
    return arp_.poll(now, buf_.data(), buf_.size());
  }
  Bytes sent(size_t n) const {
    return Bytes(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(n));
  }

  Arp arp_;
  std::array<uint8_t, 64> buf_{};
};

TEST_F(ArpResolveTest, RetriesAtIntervalThenFails) {
  const TimeNs t0 = 1000 * kSec + 123;
  EXPECT_EQ(poll(t0), 0u);
  ASSERT_TRUE(arp_.resolve(kPeerIp, t0));
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kIncomplete);
  EXPECT_LE(arp_.next_timer(), t0);
  for (int i = 0; i < 3; ++i) {
    const TimeNs at = t0 + static_cast<TimeNs>(i) * kSec;
    if (i > 0) {
      EXPECT_EQ(poll(at - 1), 0u) << "request " << i << " early";
    }
    const size_t n = poll(at);
    ASSERT_EQ(n, kArpFrameSize) << "request " << i;
    EXPECT_EQ(sent(n), kRequestRef);
    EXPECT_EQ(poll(at), 0u) << "one request per interval";
    EXPECT_EQ(arp_.next_timer(), at + kSec);
    EXPECT_TRUE(arp_.resolve(kPeerIp, at)) << "resolving again changes nothing";
    EXPECT_EQ(arp_.next_timer(), at + kSec);
  }
  EXPECT_EQ(arp_.stats().requests_sent, 3u);
  EXPECT_EQ(poll(t0 + 3 * kSec - 1), 0u);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kIncomplete);
  EXPECT_EQ(poll(t0 + 3 * kSec), 0u);  // no fourth request: gave up
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kFailed);
  EXPECT_EQ(arp_.neighbors().stats().failed, 1u);
  EXPECT_EQ(arp_.stats().requests_sent, 3u);
  MacAddr mac{};
  EXPECT_FALSE(arp_.lookup(kPeerIp, t0 + 3 * kSec, &mac));
  EXPECT_EQ(poll(t0 + 10 * kSec), 0u);

  // Resolving again starts afresh.
  ASSERT_TRUE(arp_.resolve(kPeerIp, t0 + 20 * kSec));
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kIncomplete);
  EXPECT_EQ(poll(t0 + 20 * kSec), kArpFrameSize);
}

TEST_F(ArpResolveTest, FailedEntryIsDroppedAfterReachableTime) {
  ASSERT_TRUE(arp_.resolve(kPeerIp, 0));
  for (TimeNs s = 0; s <= 3; ++s) poll(s * kSec);
  ASSERT_EQ(arp_.state(kPeerIp), NeighborState::kFailed);
  arp_.neighbors().expire(63 * kSec - 1);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kFailed);
  arp_.neighbors().expire(63 * kSec);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kUnknown);
}

TEST_F(ArpResolveTest, ReplyCompletesResolution) {
  ASSERT_TRUE(arp_.resolve(kPeerIp, 0));
  ASSERT_EQ(poll(0), kArpFrameSize);
  const Bytes reply = reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp);
  std::array<uint8_t, 64> out;
  EXPECT_EQ(arp_.on_frame(reply.data(), reply.size(), kSec / 2, out.data(), out.size()), 0u);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kReachable);
  MacAddr mac{};
  ASSERT_TRUE(arp_.lookup(kPeerIp, kSec, &mac));
  EXPECT_EQ(mac, kPeerMac);
  for (TimeNs s = 1; s < 10; ++s) EXPECT_EQ(poll(s * kSec), 0u) << s;
  EXPECT_EQ(arp_.stats().requests_sent, 1u);
  EXPECT_EQ(arp_.neighbors().stats().learned, 1u);
}

// Both ends set up a connection at once: the peer's request for us, while
// we resolve it, answers our own (a request from anyone else does not).
TEST_F(ArpResolveTest, ARequestFromTheNeighbourWeResolveCompletesIt) {
  ASSERT_TRUE(arp_.resolve(kPeerIp, 0));
  std::array<uint8_t, 64> out;
  const Bytes other = request_from(kOtherMac, kThirdIp, kOurIp);
  arp_.on_frame(other.data(), other.size(), 0, out.data(), out.size());
  EXPECT_EQ(arp_.state(kThirdIp), NeighborState::kUnknown);
  const Bytes req = request_from(kPeerMac, kPeerIp, kOurIp);
  EXPECT_EQ(arp_.on_frame(req.data(), req.size(), 0, out.data(), out.size()), kArpFrameSize);
  MacAddr mac{};
  ASSERT_TRUE(arp_.lookup(kPeerIp, 0, &mac));
  EXPECT_EQ(mac, kPeerMac);
}

TEST_F(ArpResolveTest, LateReplyAfterFailureIsLearned) {
  ASSERT_TRUE(arp_.resolve(kPeerIp, 0));
  for (TimeNs s = 0; s <= 3; ++s) poll(s * kSec);
  ASSERT_EQ(arp_.state(kPeerIp), NeighborState::kFailed);
  const Bytes reply = reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp);
  std::array<uint8_t, 64> out;
  arp_.on_frame(reply.data(), reply.size(), 4 * kSec, out.data(), out.size());
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kReachable);
}

TEST_F(ArpResolveTest, SeveralPendingResolutions) {
  const uint32_t ips[] = {kPeerIp, kThirdIp, ipv4(192, 168, 1, 40)};
  for (uint32_t ip : ips) ASSERT_TRUE(arp_.resolve(ip, 0));
  std::set<uint32_t> asked;
  for (int i = 0; i < 3; ++i) {
    const size_t n = poll(0);
    ASSERT_EQ(n, kArpFrameSize);
    ArpPacket p;
    ASSERT_EQ(parse_exact(sent(n), &p), ArpError::kNone);
    EXPECT_EQ(p.op, kArpOpRequest);
    asked.insert(p.target_ip);
  }
  EXPECT_EQ(poll(0), 0u);
  EXPECT_EQ(asked, std::set<uint32_t>(std::begin(ips), std::end(ips)));
}

TEST_F(ArpResolveTest, SmallBufferKeepsRequestDue) {
  ASSERT_TRUE(arp_.resolve(kPeerIp, 0));
  EXPECT_EQ(arp_.poll(0, buf_.data(), kArpFrameSize - 1), 0u);
  EXPECT_EQ(arp_.stats().requests_sent, 0u);
  EXPECT_EQ(arp_.poll(0, buf_.data(), kArpFrameSize), kArpFrameSize);
  EXPECT_EQ(arp_.stats().requests_sent, 1u);
}

TEST(NeighborTableConfig, IntervalAndRequestCountAreConfigurable) {
  NeighborConfig cfg;
  cfg.retry_interval_ns = 250'000'000;
  cfg.max_requests = 5;
  NeighborTable t(8, cfg);
  ASSERT_TRUE(t.resolve(kPeerIp, 0));
  uint32_t ip = 0;
  int sent = 0;
  for (TimeNs now = 0; now < 3 * kSec; now += 50'000'000) {
    if (t.next_request(now, &ip)) {
      EXPECT_EQ(ip, kPeerIp);
      EXPECT_EQ(now, static_cast<TimeNs>(sent) * 250'000'000) << "request " << sent;
      ++sent;
    }
    if (t.state(kPeerIp) == NeighborState::kFailed) {
      EXPECT_EQ(now, 5 * 250'000'000u);
      break;
    }
  }
  EXPECT_EQ(sent, 5);
  EXPECT_EQ(t.state(kPeerIp), NeighborState::kFailed);
}

TEST_F(ArpResolveTest, EntryInUseIsRefreshedBeforeExpiry) {
  const Bytes reply = reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp);
  std::array<uint8_t, 64> out;
  ASSERT_TRUE(arp_.resolve(kPeerIp, 0));
  ASSERT_EQ(poll(0), kArpFrameSize);
  arp_.on_frame(reply.data(), reply.size(), 0, out.data(), out.size());  // expires at 60 s
  MacAddr mac{};
  ASSERT_TRUE(arp_.lookup(kPeerIp, kSec, &mac));  // in use
  // Refresh from 60 s - 3 * 1 s on, once per second: unicast probes to the
  // MAC we hold (only its holder should answer).
  EXPECT_EQ(poll(kSec), 0u);  // the resolution's retry time passes: nothing due
  EXPECT_EQ(arp_.next_timer(), 57 * kSec);
  EXPECT_EQ(poll(57 * kSec - 1), 0u);
  ASSERT_EQ(poll(57 * kSec), kArpFrameSize);
  EXPECT_EQ(sent(kArpFrameSize), frame_of(ArpPacket{kPeerMac, kOurMac, kArpOpRequest, kOurMac,
                                                    kOurIp, MacAddr{}, kPeerIp}));
  EXPECT_EQ(poll(58 * kSec - 1), 0u);
  EXPECT_EQ(poll(58 * kSec), kArpFrameSize);
  EXPECT_TRUE(arp_.lookup(kPeerIp, 58 * kSec, &mac));  // still usable meanwhile
  // The peer answers: good for another 60 s, no more requests.
  arp_.on_frame(reply.data(), reply.size(), 58 * kSec + 10, out.data(), out.size());
  EXPECT_EQ(poll(59 * kSec), 0u);
  EXPECT_TRUE(arp_.lookup(kPeerIp, 118 * kSec, &mac));
  EXPECT_EQ(arp_.stats().requests_sent, 3u);
  EXPECT_EQ(arp_.neighbors().stats().refreshed, 1u);
}

// During a refresh, a reply claims another MAC for the peer (an attacker
// timing its frame, or the peer moved): the mapping changes only if the
// MAC we hold stops answering our unicast probes.
TEST_F(ArpResolveTest, AnotherMacDuringARefreshWaitsUntilTheOneWeHoldIsSilent) {
  for (const bool old_answers : {true, false}) {
    Arp arp(config());
    std::array<uint8_t, 64> out;
    auto feed = [&](const Bytes& f, TimeNs now) {
      arp.on_frame(f.data(), f.size(), now, out.data(), out.size());
    };
    ASSERT_TRUE(arp.resolve(kPeerIp, 0));
    ASSERT_EQ(arp.poll(0, out.data(), out.size()), kArpFrameSize);
    feed(reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp), 0);
    MacAddr mac{};
    ASSERT_TRUE(arp.lookup(kPeerIp, kSec, &mac));                           // in use
    ASSERT_EQ(arp.poll(57 * kSec, out.data(), out.size()), kArpFrameSize);  // probe 1
    feed(reply_from(kOtherMac, kPeerIp, kOurMac, kOurIp), 57 * kSec + 5);
    ASSERT_TRUE(arp.lookup(kPeerIp, 57 * kSec + 6, &mac));
    EXPECT_EQ(mac, kPeerMac) << old_answers;
    ASSERT_EQ(arp.poll(58 * kSec, out.data(), out.size()), kArpFrameSize);  // probe 2
    if (old_answers) {
      feed(reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp), 58 * kSec + 5);
      for (TimeNs s = 59; s <= 61; ++s) arp.poll(s * kSec, out.data(), out.size());
      ASSERT_TRUE(arp.lookup(kPeerIp, 61 * kSec, &mac));
      EXPECT_EQ(mac, kPeerMac);
      EXPECT_EQ(arp.neighbors().stats().mac_change_refused, 1u);
      EXPECT_EQ(arp.neighbors().stats().mac_changes, 0u);
    } else {
      ASSERT_EQ(arp.poll(59 * kSec, out.data(), out.size()), kArpFrameSize);  // probe 3
      ASSERT_TRUE(arp.lookup(kPeerIp, 59 * kSec + 1, &mac));
      EXPECT_EQ(mac, kPeerMac);  // not yet
      arp.poll(60 * kSec, out.data(), out.size());
      ASSERT_TRUE(arp.lookup(kPeerIp, 60 * kSec, &mac));
      EXPECT_EQ(mac, kOtherMac);
      EXPECT_EQ(arp.neighbors().stats().mac_changes, 1u);
    }
  }
}

TEST_F(ArpResolveTest, SilentPeerExpiresDespiteRefresh) {
  ASSERT_TRUE(arp_.neighbors().learn(kPeerIp, kPeerMac, 0));
  MacAddr mac{};
  ASSERT_TRUE(arp_.lookup(kPeerIp, 0, &mac));
  for (TimeNs s = 50; s <= 60; ++s) poll(s * kSec);
  EXPECT_EQ(arp_.stats().requests_sent, 3u);  // at 57, 58, 59 s
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kUnknown);
  EXPECT_FALSE(arp_.lookup(kPeerIp, 60 * kSec, &mac));
}

TEST_F(ArpResolveTest, UnusedEntryIsNotRefreshed) {
  ASSERT_TRUE(arp_.neighbors().learn(kPeerIp, kPeerMac, 0));
  for (TimeNs s = 50; s <= 60; ++s) EXPECT_EQ(poll(s * kSec), 0u) << s;
  EXPECT_EQ(arp_.stats().requests_sent, 0u);
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kUnknown);
}

TEST_F(ArpResolveTest, ExpiredEntryIsResolvedAgain) {
  ASSERT_TRUE(arp_.neighbors().learn(kPeerIp, kPeerMac, 0));
  MacAddr mac{};
  ASSERT_FALSE(arp_.lookup(kPeerIp, 60 * kSec, &mac));
  ASSERT_TRUE(arp_.resolve(kPeerIp, 60 * kSec));  // before expire() dropped it
  EXPECT_EQ(arp_.state(kPeerIp), NeighborState::kIncomplete);
  EXPECT_EQ(poll(60 * kSec), kArpFrameSize);
}

// ---------------------------------------------------------------------------
// Capacity

TEST(NeighborTable, FullTableRefusesAndCounts) {
  NeighborTable t(4);
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(t.learn(ipv4(10, 0, 0, 1 + i), kPeerMac, 0));
  EXPECT_EQ(t.size(), 4u);
  EXPECT_FALSE(t.learn(ipv4(10, 0, 0, 9), kPeerMac, 0));
  EXPECT_FALSE(t.add_static(ipv4(10, 0, 0, 9), kPeerMac));
  EXPECT_EQ(t.stats().table_full, 2u);
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.state(ipv4(10, 0, 0, 9)), NeighborState::kUnknown);
  // Existing entries still work, and can be converted.
  EXPECT_TRUE(t.add_static(ipv4(10, 0, 0, 1), kOtherMac));
  MacAddr mac{};
  for (uint32_t i = 0; i < 4; ++i) EXPECT_TRUE(t.lookup(ipv4(10, 0, 0, 1 + i), kSec, &mac));
  // Expired entries make room on demand.
  EXPECT_TRUE(t.learn(ipv4(10, 0, 0, 9), kPeerMac, 60 * kSec));
  EXPECT_EQ(t.size(), 2u);  // the static one and the new one
}

// A new resolution of ours in a full table takes the place of a failed
// entry, else of the learned mapping that expires first; static entries
// and resolutions under way stay.
TEST(NeighborTable, ANewResolutionEvictsAFailedOrLearnedEntry) {
  NeighborConfig cfg;
  NeighborTable t(4, cfg);
  ASSERT_TRUE(t.add_static(ipv4(10, 0, 0, 1), kPeerMac));
  ASSERT_TRUE(t.learn(ipv4(10, 0, 0, 2), kPeerMac, 0));     // expires at 60 s
  ASSERT_TRUE(t.learn(ipv4(10, 0, 0, 3), kPeerMac, kSec));  // at 61 s
  ASSERT_TRUE(t.resolve(ipv4(10, 0, 0, 4), kSec));
  EXPECT_TRUE(t.resolve(ipv4(10, 0, 0, 5), 2 * kSec));
  EXPECT_EQ(t.state(ipv4(10, 0, 0, 2)), NeighborState::kUnknown);  // expired first: gone
  EXPECT_EQ(t.stats().evicted, 1u);
  EXPECT_TRUE(t.resolve(ipv4(10, 0, 0, 6), 2 * kSec));
  EXPECT_EQ(t.state(ipv4(10, 0, 0, 3)), NeighborState::kUnknown);
  // Left: the static entry and three resolutions under way.
  EXPECT_FALSE(t.resolve(ipv4(10, 0, 0, 7), 2 * kSec));
  EXPECT_EQ(t.stats().table_full, 1u);
  EXPECT_EQ(t.state(ipv4(10, 0, 0, 1)), NeighborState::kStatic);
}

// ARP table exhaustion (issue 32): spoofed requests from 1000 addresses
// are answered, take no entry, and the peer still resolves (256 of them
// filled the table, and resolve(peer) was refused).
TEST(NeighborTable, SpoofedRequestsTakeNoEntriesAndThePeerStillResolves) {
  ArpConfig c;
  c.mac = kOurMac;
  c.ip = kOurIp;
  c.capacity = 256;
  Arp arp(c);
  std::array<uint8_t, 64> out;
  for (uint32_t i = 0; i < 1000; ++i) {
    const MacAddr made_up = {
        0x02, 0x66, 0, 0, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
    const Bytes req = request_from(made_up, ipv4(10, 9, 0, 0) + i, kOurIp);
    EXPECT_EQ(arp.on_frame(req.data(), req.size(), 0, out.data(), out.size()), kArpFrameSize);
  }
  EXPECT_EQ(arp.stats().replies_sent, 1000u);
  EXPECT_EQ(arp.neighbors().size(), 0u);
  EXPECT_EQ(arp.neighbors().stats().table_full, 0u);
  ASSERT_TRUE(arp.resolve(kPeerIp, kSec));
  ASSERT_EQ(arp.poll(kSec, out.data(), out.size()), kArpFrameSize);
  const Bytes reply = reply_from(kPeerMac, kPeerIp, kOurMac, kOurIp);
  arp.on_frame(reply.data(), reply.size(), kSec, out.data(), out.size());
  MacAddr mac{};
  ASSERT_TRUE(arp.lookup(kPeerIp, kSec, &mac));
  EXPECT_EQ(mac, kPeerMac);
}

TEST(NeighborTable, ZeroCapacity) {
  NeighborTable t(0);
  EXPECT_FALSE(t.learn(kPeerIp, kPeerMac, 0));
  EXPECT_FALSE(t.resolve(kPeerIp, 0));
  EXPECT_FALSE(t.add_static(kPeerIp, kPeerMac));
  EXPECT_EQ(t.state(kPeerIp), NeighborState::kUnknown);
  uint32_t ip;
  EXPECT_FALSE(t.next_request(0, &ip));
}

TEST(NeighborTable, FillsToCapacity) {
  NeighborTable t(256);
  for (uint32_t i = 0; i < 256; ++i) {
    const MacAddr m = {0x02, 0, 0, 0, static_cast<uint8_t>(i >> 8), static_cast<uint8_t>(i)};
    ASSERT_TRUE(t.learn(ipv4(10, 1, 0, 0) + i * 7, m, 0)) << i;
  }
  EXPECT_FALSE(t.learn(ipv4(10, 2, 0, 0), kPeerMac, 0));
  for (uint32_t i = 0; i < 256; ++i) {
    MacAddr m{};
    ASSERT_TRUE(t.lookup(ipv4(10, 1, 0, 0) + i * 7, kSec, &m)) << i;
    EXPECT_EQ(m[5], static_cast<uint8_t>(i));
    EXPECT_EQ(m[4], static_cast<uint8_t>(i >> 8));
  }
}

// Random learn/static/remove/resolve against a std::map: the open-addressing
// index with backward-shift deletion must never lose or invent an entry.
TEST(NeighborTable, RandomizedAgainstMap) {
  constexpr uint32_t kCap = 48;
  NeighborTable t(kCap);
  struct Model {
    MacAddr mac;
    NeighborState state;
  };
  std::map<uint32_t, Model> model;
  std::mt19937 rng(12345);
  // A pool wider than the table, with both consecutive and spread addresses.
  std::vector<uint32_t> pool;
  for (uint32_t i = 0; i < 40; ++i) pool.push_back(ipv4(10, 0, 0, i));
  for (uint32_t i = 0; i < 40; ++i) pool.push_back(ipv4(10, i, 7, 1));
  for (uint32_t i = 0; i < 40; ++i) pool.push_back(rng());
  for (int step = 0; step < 20000; ++step) {
    const uint32_t ip = pool[rng() % pool.size()];
    const MacAddr mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(rng() % 4)};
    const bool present = model.count(ip) != 0;
    const bool room = present || model.size() < kCap;
    switch (rng() % 5) {
      case 0:
      case 1: {
        const bool ok = t.learn(ip, mac, 0);
        if (present && model[ip].state == NeighborState::kStatic) {
          EXPECT_EQ(ok, model[ip].mac == mac);
        } else {
          EXPECT_EQ(ok, room);
          if (room) model[ip] = {mac, NeighborState::kReachable};
        }
        break;
      }
      case 2:
        EXPECT_EQ(t.add_static(ip, mac), room);
        if (room) model[ip] = {mac, NeighborState::kStatic};
        break;
      case 3:
        EXPECT_EQ(t.remove(ip), present);
        model.erase(ip);
        break;
      case 4:
        if (!room) break;  // a full table evicts (ANewResolutionEvictsAFailedOrLearnedEntry)
        EXPECT_TRUE(t.resolve(ip, 0));
        if (!present) model[ip] = {MacAddr{}, NeighborState::kIncomplete};
        break;
    }
    ASSERT_EQ(t.size(), model.size()) << "step " << step;
    if (step % 64 == 0) {
      for (uint32_t p : pool) {
        auto it = model.find(p);
        ASSERT_EQ(t.state(p), it == model.end() ? NeighborState::kUnknown : it->second.state)
            << "step " << step << " ip " << p;
        MacAddr m{};
        const bool known = it != model.end() && it->second.state != NeighborState::kIncomplete;
        ASSERT_EQ(t.lookup(p, 1, &m), known) << "step " << step;
        if (known) {
          ASSERT_EQ(m, it->second.mac);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Next hop

TEST(ArpNextHop, NoGatewayMeansEveryPeerIsOnLink) {
  ArpConfig c;
  c.ip = ipv4(10, 0, 0, 1);
  c.prefix_len = 24;
  Arp arp(c);
  EXPECT_EQ(arp.next_hop(ipv4(10, 0, 0, 2)), ipv4(10, 0, 0, 2));
  EXPECT_EQ(arp.next_hop(ipv4(172, 16, 0, 2)), ipv4(172, 16, 0, 2));
}

TEST(ArpNextHop, GatewayForOffSubnetPeers) {
  ArpConfig c;
  c.ip = ipv4(10, 0, 0, 17);
  c.gateway = ipv4(10, 0, 0, 1);
  c.prefix_len = 24;
  Arp arp(c);
  EXPECT_EQ(arp.next_hop(ipv4(10, 0, 0, 2)), ipv4(10, 0, 0, 2));
  EXPECT_EQ(arp.next_hop(ipv4(10, 0, 0, 255)), ipv4(10, 0, 0, 255));
  EXPECT_EQ(arp.next_hop(ipv4(10, 0, 1, 2)), ipv4(10, 0, 0, 1));
  EXPECT_EQ(arp.next_hop(ipv4(11, 0, 0, 2)), ipv4(10, 0, 0, 1));
  EXPECT_EQ(arp.next_hop(ipv4(138, 0, 0, 17)), ipv4(10, 0, 0, 1));  // differs in the top bit
  EXPECT_TRUE(arp.on_link(ipv4(10, 0, 0, 200)));
  EXPECT_FALSE(arp.on_link(ipv4(10, 0, 1, 200)));
}

TEST(ArpNextHop, PrefixLengths) {
  ArpConfig c;
  c.ip = ipv4(10, 0, 0, 4);
  c.gateway = ipv4(10, 0, 0, 5);
  c.prefix_len = 31;  // point-to-point link
  EXPECT_EQ(Arp(c).next_hop(ipv4(10, 0, 0, 5)), ipv4(10, 0, 0, 5));
  EXPECT_EQ(Arp(c).next_hop(ipv4(10, 0, 0, 6)), ipv4(10, 0, 0, 5));
  c.prefix_len = 32;  // routed host: everything through the gateway
  EXPECT_EQ(Arp(c).next_hop(ipv4(10, 0, 0, 7)), ipv4(10, 0, 0, 5));
  c.prefix_len = 0;  // everything on-link
  EXPECT_EQ(Arp(c).next_hop(ipv4(200, 0, 0, 7)), ipv4(200, 0, 0, 7));
  c.prefix_len = 8;
  EXPECT_EQ(Arp(c).next_hop(ipv4(10, 200, 0, 7)), ipv4(10, 200, 0, 7));
  EXPECT_EQ(Arp(c).next_hop(ipv4(11, 0, 0, 4)), ipv4(10, 0, 0, 5));
}

TEST(ArpNextHop, ResolvesTheGatewayForRemotePeers) {
  ArpConfig c;
  c.mac = kOurMac;
  c.ip = kOurIp;
  c.gateway = ipv4(192, 168, 1, 1);
  c.prefix_len = 24;
  Arp arp(c);
  const uint32_t remote = ipv4(10, 9, 8, 7);
  const uint32_t hop = arp.next_hop(remote);
  ASSERT_EQ(hop, c.gateway);
  ASSERT_TRUE(arp.resolve(hop, 0));
  std::array<uint8_t, 60> buf;
  ASSERT_EQ(arp.poll(0, buf.data(), buf.size()), kArpFrameSize);
  ArpPacket p;
  ASSERT_EQ(parse_arp(buf.data(), buf.size(), &p), ArpError::kNone);
  EXPECT_EQ(p.target_ip, c.gateway);
}

}  // namespace
}  // namespace braid::net

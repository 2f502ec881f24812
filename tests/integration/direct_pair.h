// Two endpoints wired back to back with no network in between: the test
// moves (and may edit, drop or reorder) every frame itself.
#pragma once

#include <algorithm>
#include <tuple>
#include <vector>

#include "sim_pair.h"
#include "wire/byte_order.h"
#include "wire/pds.h"

namespace braid::test {

using Frame = std::vector<uint8_t>;

// A frame as the endpoints decode it.
inline wire::ParsedPacket parse(const Frame& f) {
  wire::ParsedPacket pkt;
  EXPECT_EQ(wire::decode_frame(f.data(), f.size(), wire::DecodeOptions{}, &pkt),
            wire::DropReason::kNone);
  return pkt;
}

// A copy of a CTRL frame with its header changed by edit(CtrlHeader&):
// a forged control packet.
template <typename Edit>
Frame with_ctrl(Frame f, Edit edit) {
  wire::CtrlHeader h;
  EXPECT_GT(wire::decode_ctrl(f.data() + wire::kL2L4Size, wire::kCtrlSize, &h), 0u);
  edit(h);
  wire::encode_ctrl(f.data() + wire::kL2L4Size, h);
  return f;
}

class DirectPair {
 public:
  // crc: both endpoints put CRC-32C trailers on what they send. auth: both
  // run the authenticated mode with kAuthSecret.
  // trim_dscp: the DSCP that marks a trimmed frame (trimmed() makes them).
  // cc_per_peer: EndpointConfig's (a peer's connections share congestion state).
  explicit DirectPair(ConnectionConfig c = {}, uint32_t cq_depth = 1024, bool crc = false,
                      AuthMode auth = AuthMode::kOff, uint8_t trim_dscp = 0xff,
                      bool cc_per_peer = true)
      : a(endpoint_config(mac_of(1), kIpA, crc, auth, trim_dscp, cc_per_peer)),
        b(endpoint_config(mac_of(2), kIpB, crc, auth, trim_dscp, cc_per_peer)),
        a_scq(cq_depth),
        a_rcq(cq_depth),
        b_scq(cq_depth),
        b_rcq(cq_depth) {
    std::tie(qa, qb) = add_pair(c, c, 1, 2);
  }

  static constexpr wire::TssSecret kAuthSecret = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                                  12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                                  23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
  static EndpointConfig endpoint_config(const wire::MacAddr& mac, uint32_t ip, bool crc,
                                        AuthMode auth, uint8_t trim_dscp = 0xff,
                                        bool cc_per_peer = true) {
    EndpointConfig ec{mac, ip, wire::kUetUdpPort, crc, trim_dscp, 1000, {}};
    ec.cc_per_peer = cc_per_peer;
    ec.auth = auth;
    ec.auth_secret = kAuthSecret;
    return ec;
  }

  // Connections `id_a` on a and `id_b` on b, addressed to each other.
  std::pair<Connection*, Connection*> add_pair(ConnectionConfig ca, ConnectionConfig cb,
                                               uint16_t id_a, uint16_t id_b) {
    ca.local_id = cb.remote_id = id_a;
    cb.local_id = ca.remote_id = id_b;
    ca.remote_mac = mac_of(2);
    ca.remote_ip = kIpB;
    cb.remote_mac = mac_of(1);
    cb.remote_ip = kIpA;
    return {a.create_connection(ca, &a_scq, &a_rcq), b.create_connection(cb, &b_scq, &b_rcq)};
  }

  // A second pair of connections (ids 3 on a, 4 on b) where b is a READ
  // responder left in RTR, as perftest's ib_read_bw server: it sends from
  // PSN 0 while a expects 5000, the PSN b would have been given at RTS.
  std::pair<Connection*, Connection*> add_rtr_responder_pair(const ConnectionConfig& c) {
    // a's initial PSN 777, b's (given at RTS) 5000; b answers in RTR from
    // a's PSN on (its rq_psn), as the verbs layer does.
    ConnectionConfig ca = c, cb = c;
    ca.tx_psn = 777;
    ca.rx_psn = 5000;
    cb.rx_psn = 777;
    cb.tx_psn = 777;
    return add_pair(ca, cb, 3, 4);
  }

  // A WRITE of `len` bytes by `q` (on `from`) from `src` into `dst`,
  // registered for it at `to`: the frames `from` sends for it, not delivered.
  std::vector<Frame> post_write(Connection* q, Endpoint& from, Endpoint& to, uint8_t* src,
                                uint8_t* dst, uint32_t len) {
    const uint32_t key = to.memory().register_region(dst, len, kAccessRemoteWrite, 0);
    EXPECT_EQ(q->post_send(request(1, Opcode::kWrite, src, len, dst, key)), PostError::kOk);
    return drain(from);
  }

  // Every frame `from` wants to send now.
  std::vector<Frame> drain(Endpoint& from) {
    std::vector<Frame> out;
    Frame buf(9216);
    uint32_t n;
    while ((n = from.transmit(buf.data(), static_cast<uint32_t>(buf.size()), now)) > 0) {
      out.emplace_back(buf.begin(), buf.begin() + n);
    }
    return out;
  }
  void deliver(Endpoint& to, const std::vector<Frame>& frames) {
    for (const Frame& f : frames) to.receive(f.data(), static_cast<uint32_t>(f.size()), now);
  }
  // Moves frames both ways until neither side has anything to send.
  void settle(int rounds = 1000) {
    for (int i = 0; i < rounds; ++i) {
      auto ab = drain(a);
      auto ba = drain(b);
      if (ab.empty() && ba.empty()) return;
      now += 1000;
      deliver(b, ab);
      deliver(a, ba);
      a.advance(now);
      b.advance(now);
    }
  }

  // Moves frames both ways in rounds of `step_ns` of virtual time (each
  // side's frames of a round leave as one batch, as an engine's poll sends
  // them), running timers, until `done` or `budget_ns` has passed. Frames
  // `drop(frame, a_to_b)` picks are lost. Frames still on their way when it
  // returns arrive in the next call (they were lost before: a test that
  // acted on a NACK then saw its answer only after the RTO).
  template <typename Done, typename Drop>
  bool run_for(TimeNs budget_ns, TimeNs step_ns, Done done, Drop drop) {
    const TimeNs end = now + budget_ns;
    std::vector<Frame>& ab = in_flight_ab_;
    std::vector<Frame>& ba = in_flight_ba_;
    while (now < end) {
      if (done()) return true;
      for (Frame& f : drain(a)) ab.push_back(std::move(f));
      for (Frame& f : drain(b)) ba.push_back(std::move(f));
      std::erase_if(ab, [&](const Frame& f) { return drop(f, true); });
      std::erase_if(ba, [&](const Frame& f) { return drop(f, false); });
      now += step_ns;
      // Each receiver takes a burst at a time and answers it (as an engine
      // polls): what it sends goes out next round.
      std::vector<Frame> next_ab, next_ba;
      receive_in_bursts(b, ab, next_ba);
      receive_in_bursts(a, ba, next_ab);
      ab = std::move(next_ab);
      ba = std::move(next_ba);
      a.advance(now);
      b.advance(now);
    }
    return done();
  }
  static constexpr size_t kBurst = 32;
  void receive_in_bursts(Endpoint& to, const std::vector<Frame>& in, std::vector<Frame>& out) {
    for (size_t i = 0; i < in.size(); i += kBurst) {
      for (size_t k = i; k < std::min(in.size(), i + kBurst); ++k) {
        to.receive(in[k].data(), static_cast<uint32_t>(in[k].size()), now);
      }
      for (Frame& f : drain(to)) out.push_back(std::move(f));
    }
  }
  template <typename Done>
  bool run_for(TimeNs budget_ns, TimeNs step_ns, Done done) {
    return run_for(budget_ns, step_ns, done, [](const Frame&, bool) { return false; });
  }

  TimeNs now = 0;
  std::vector<Frame> in_flight_ab_, in_flight_ba_;  // sent in run_for's last round
  Endpoint a, b;
  CompletionQueue a_scq, a_rcq, b_scq, b_rcq;
  Connection* qa;
  Connection* qb;
};

// Re-marks a frame's IPv4 ECN field, fixing the header checksum.
inline void set_ecn(Frame& f, uint8_t ecn) {
  uint8_t* ip = f.data() + wire::kEthernetSize;
  ip[1] = static_cast<uint8_t>((ip[1] & 0xfc) | ecn);
  wire::store_be16(ip + 10, 0);
  wire::store_be16(ip + 10, wire::ipv4_checksum(ip, wire::kIpv4Size));
}

// A data frame as a trimming switch leaves it: its headers up to the PDS
// request header, the IP and UDP lengths to match, DSCP `trim_dscp`.
inline Frame trimmed(Frame f, uint8_t trim_dscp) {
  f.resize(wire::kL2L4Size + wire::kRequestSize);
  uint8_t* ip = f.data() + wire::kEthernetSize;
  const uint16_t ip_len = static_cast<uint16_t>(f.size() - wire::kEthernetSize);
  wire::store_be16(ip + 2, ip_len);
  wire::store_be16(ip + wire::kIpv4Size + 4, static_cast<uint16_t>(ip_len - wire::kIpv4Size));
  ip[1] = static_cast<uint8_t>((trim_dscp << 2) | (ip[1] & 3));
  wire::store_be16(ip + 10, 0);
  wire::store_be16(ip + 10, wire::ipv4_checksum(ip, wire::kIpv4Size));
  return f;
}

inline uint16_t entropy_of(const Frame& f) {
  return wire::load_be16(f.data() + wire::kEthernetSize + wire::kIpv4Size);
}

}  // namespace braid::test

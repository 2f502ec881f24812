// What a switch does to a frame, shared by the fabric simulator (fabric.h),
// the software switch on the DPDK datapath (switch/soft_switch.h) and the
// two-host simulator (network/sim_network.h), so all mark, trim and hash
// alike: the ECMP hash of the 5-tuple, WRED's
// marking probability, and UET-style trimming (cut to the headers, say so
// in the DSCP). Frames are Ethernet + IPv4 (+ UDP).
#pragma once

#include <algorithm>
#include <cstdint>

#include "wire/byte_order.h"
#include "wire/frame.h"

namespace braid::model {

inline constexpr uint32_t kIpOff = wire::kEthernetSize;
inline constexpr uint32_t kUdpOff = wire::kEthernetSize + wire::kIpv4Size;

// A 64-bit finaliser (splitmix64's).
inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// The ECMP key of an IPv4 frame: addresses, protocol and both ports, with
// the switch's seed. A member of an equal-cost group of n is key % n.
inline uint64_t ecmp_key(const uint8_t* f, uint64_t seed) {
  uint64_t key =
      (uint64_t{wire::load_be32(f + kIpOff + 12)} << 32) | wire::load_be32(f + kIpOff + 16);
  key = mix(key ^ seed);
  return mix(key ^ (uint64_t{wire::load_be32(f + kUdpOff)} << 8) ^ f[kIpOff + 9]);
}

// WRED: the probability that an ECT packet meeting `queued` bytes is
// marked: none up to kmin, rising linearly to pmax at kmax, 1 from kmax on.
// kmin 0: marking is off.
inline double wred_probability(uint64_t queued, uint32_t kmin, uint32_t kmax, double pmax) {
  if (kmin == 0 || queued <= kmin) return 0.0;
  if (queued >= kmax) return 1.0;
  const double span = std::max<double>(1, kmax - kmin);
  return pmax * static_cast<double>(queued - kmin) / span;
}

// Rewrites the IPv4 TOS byte and the header checksum.
inline void set_tos(uint8_t* f, uint8_t tos) {
  uint8_t* ip = f + kIpOff;
  ip[1] = tos;
  wire::store_be16(ip + 10, 0);
  wire::store_be16(ip + 10, wire::ipv4_checksum(ip, wire::kIpv4Size));
}

// Marks an ECT frame CE; false if it is not ECN-capable (or already CE).
inline bool mark_ce(uint8_t* f) {
  const uint8_t tos = f[kIpOff + 1];
  if ((tos & 3) == wire::kEcnNotEct || (tos & 3) == wire::kEcnCe) return false;
  set_tos(f, static_cast<uint8_t>((tos & 0xfc) | wire::kEcnCe));
  return true;
}

// ACKs, NACKs and other control frames, and trimmed headers: the priority
// class.
inline bool is_priority(const uint8_t* f, uint8_t trim_dscp) {
  const uint8_t dscp = f[kIpOff + 1] >> 2;
  return dscp == wire::kDscpAck || dscp == trim_dscp;
}

// Cuts a frame to its first `keep` bytes (Ethernet, IP, UDP and the
// transport's headers) and says so in the DSCP; the lengths in the IP and
// UDP headers follow. Returns the new length.
inline uint32_t trim_frame(uint8_t* f, uint32_t keep, uint8_t trim_dscp) {
  const uint16_t ip_len = static_cast<uint16_t>(keep - wire::kEthernetSize);
  wire::store_be16(f + kIpOff + 2, ip_len);
  wire::store_be16(f + kUdpOff + 4, static_cast<uint16_t>(ip_len - wire::kIpv4Size));
  set_tos(f, static_cast<uint8_t>((trim_dscp << 2) | (f[kIpOff + 1] & 3)));
  return keep;
}

}  // namespace braid::model

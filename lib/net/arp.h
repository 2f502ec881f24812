// ARP (RFC 826) for one Braid endpoint: answers requests for its own IPv4
// address and resolves the MAC addresses of its neighbours (peers on the same
// segment, or the gateway for peers behind routers). Sans-IO like the rest of
// the core: it is handed received ARP frames and the time, and writes the
// frames to send into buffers the caller provides. Nothing here allocates
// after construction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.h"
#include "wire/frame.h"

namespace braid::net {

using wire::MacAddr;

inline constexpr size_t kArpSize = 28;                                    // the ARP packet proper
inline constexpr size_t kArpHeaderSize = wire::kEthernetSize + kArpSize;  // 42
inline constexpr size_t kArpFrameSize = 60;  // padded to the Ethernet minimum (without FCS)
inline constexpr uint16_t kArpHtypeEthernet = 1;
inline constexpr uint16_t kArpOpRequest = 1;
inline constexpr uint16_t kArpOpReply = 2;
inline constexpr MacAddr kBroadcastMac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

// Why a received frame is not a usable ARP packet. Each has a counter in Arp.
enum class ArpError : uint8_t {
  kNone = 0,
  kTruncated,         // shorter than Ethernet + 28-byte ARP packet
  kNotArp,            // EtherType is not 0x0806
  kNotEthernetIpv4,   // hardware type not Ethernet or protocol type not IPv4
  kBadAddressLength,  // hardware length not 6 or protocol length not 4
  kUnknownOpcode,     // neither request nor reply
  kCount,
};

const char* arp_error_name(ArpError e);

// A decoded Ethernet + ARP frame. Addresses in host order.
struct ArpPacket {
  MacAddr eth_dst{};
  MacAddr eth_src{};
  uint16_t op = 0;
  MacAddr sender_mac{};
  uint32_t sender_ip = 0;
  MacAddr target_mac{};
  uint32_t target_ip = 0;
  bool operator==(const ArpPacket&) const = default;
};

// Never reads outside [frame, frame + len). Bytes after the 42 of the ARP
// frame (padding, FCS) are ignored.
ArpError parse_arp(const uint8_t* frame, size_t len, ArpPacket* out);

// The builders write kArpFrameSize bytes (zero padding after the 42 bytes of
// Ethernet + ARP) and return that length, or 0 and write nothing when
// cap < kArpFrameSize.
size_t build_arp(uint8_t* buf, size_t cap, const ArpPacket& p);
// Broadcast "who has target_ip? tell ip".
size_t build_arp_request(uint8_t* buf, size_t cap, const MacAddr& mac, uint32_t ip,
                         uint32_t target_ip);
// Unicast "ip is at mac", to the requester (target_mac, target_ip).
size_t build_arp_reply(uint8_t* buf, size_t cap, const MacAddr& mac, uint32_t ip,
                       const MacAddr& target_mac, uint32_t target_ip);
// Unicast "who has target_ip? tell ip", to the MAC we hold for it: a
// refresh of a mapping in use, which only its holder should answer.
size_t build_arp_probe(uint8_t* buf, size_t cap, const MacAddr& mac, uint32_t ip,
                       const MacAddr& target_mac, uint32_t target_ip);
// Gratuitous ARP (an RFC 5227 announcement): a broadcast request with sender
// and target IP both `ip`. Neighbours that know us update their caches.
size_t build_gratuitous_arp(uint8_t* buf, size_t cap, const MacAddr& mac, uint32_t ip);

enum class NeighborState : uint8_t {
  kUnknown = 0,  // not in the table
  kIncomplete,   // being resolved: requests sent, no answer yet
  kReachable,    // learned from ARP, valid until expires_at
  kStatic,       // configured; never expires, never overridden by ARP
  kFailed,       // max_requests went unanswered ("no ARP reply from a.b.c.d")
};

const char* neighbor_state_name(NeighborState s);

struct NeighborConfig {
  TimeNs reachable_ns = 60'000'000'000;      // a learned mapping is trusted this long
  TimeNs retry_interval_ns = 1'000'000'000;  // between requests for one address
  uint32_t max_requests = 3;                 // requests sent (the first included) before giving up
};

struct Neighbor {
  uint32_t ip = 0;
  MacAddr mac{};
  NeighborState state = NeighborState::kUnknown;
  // Looked up since the mapping was last confirmed: it is then refreshed
  // before it expires, so traffic to a live peer never waits for ARP.
  bool used = false;
  uint32_t requests = 0;  // sent in the current resolution or refresh
  TimeNs last_request_at = 0;
  // During a refresh, a reply claimed another MAC: it replaces `mac` only if
  // the refresh's unicast probes to `mac` all go unanswered.
  MacAddr candidate{};
  bool has_candidate = false;
  TimeNs expires_at = kNever;  // reachable: mapping expires; failed: entry is dropped
};

struct NeighborStats {
  uint64_t learned = 0;             // new mappings (new entry, or incomplete/failed resolved)
  uint64_t refreshed = 0;           // a reachable mapping confirmed again
  uint64_t mac_changes = 0;         // a reachable mapping confirmed with another MAC
  uint64_t static_conflicts = 0;    // ARP claimed another MAC for a static entry: ignored
  uint64_t table_full = 0;          // an entry could not be created
  uint64_t evicted = 0;             // learned or failed entries dropped for a new resolution
  uint64_t unsolicited = 0;         // replies to no request of ours: ignored
  uint64_t mac_change_refused = 0;  // another MAC claimed, and the one we hold answered
  uint64_t challenges = 0;          // probe series started by a claim nobody asked for
  uint64_t failed = 0;              // resolutions that gave up
  uint64_t expired = 0;             // mappings (and failed entries) dropped by age
};

// The neighbour cache: a fixed number of entries indexed by an open-addressing
// hash of the IPv4 address. The timed work (requests due, giving up, expiry)
// is cached as one earliest deadline, so polling it costs nothing until then.
//
// Retry timeline with the defaults: resolve() at t; requests at t, t+1 s and
// t+2 s; failed at t+3 s. A reachable entry that is in use is refreshed from
// expires_at - max_requests * retry_interval on, at the same interval.
class NeighborTable {
 public:
  explicit NeighborTable(uint32_t capacity = 256, const NeighborConfig& cfg = {});

  // Adds or replaces (whatever state it was in). False when the table is full.
  bool add_static(uint32_t ip, const MacAddr& mac);
  bool remove(uint32_t ip);

  // The MAC of a reachable (not expired) or static neighbour. Marks a
  // reachable entry as used, so it will be refreshed before it expires.
  bool lookup(uint32_t ip, TimeNs now, MacAddr* out);
  // A mapping from a trusted source (another engine of the device that
  // resolved it). create = false only updates an entry that exists. Never
  // changes a static entry. Returns true when the mapping was stored.
  bool learn(uint32_t ip, const MacAddr& mac, TimeNs now, bool create = true);
  // An ARP reply addressed to us (or a request from a neighbour we are
  // resolving). Taken only as the answer to a request of ours: it completes
  // a resolution (incomplete or failed), or confirms a
  // mapping being refreshed. Another MAC for a mapping in use becomes a
  // candidate, taken only if the refresh's unicast probes to the MAC we
  // hold go unanswered. Anything else (no entry, no request outstanding)
  // changes nothing: false, counted as unsolicited.
  bool on_reply(uint32_t ip, const MacAddr& mac, TimeNs now);
  // ARP traffic nobody asked for claims another MAC for a mapping we hold
  // (a gratuitous ARP, a request, an unsolicited reply: a peer that moved,
  // or an attacker). The claim becomes a candidate and the mapping is
  // probed at once by unicast to the MAC we hold; the candidate replaces it
  // only if every probe goes unanswered. One series at a time per entry.
  void challenge(uint32_t ip, const MacAddr& mac, TimeNs now);
  // Starts resolving `ip` (a neighbour: the peer itself or its gateway, see
  // Arp::next_hop). No-op while a resolution is under way or the mapping is
  // valid; restarts a failed one. In a full table it evicts a failed entry,
  // else the learned one that expires first; false only when every entry
  // is static or being resolved.
  bool resolve(uint32_t ip, TimeNs now);
  // One request that is due now: marks it sent and returns its target. Also
  // does the other timed work (giving up, expiry). Call until it returns false.
  // A refresh of a mapping goes unicast, to *unicast_to (set true in
  // *unicast when given).
  bool next_request(TimeNs now, uint32_t* target_ip, MacAddr* unicast_to = nullptr,
                    bool* unicast = nullptr);
  // Gives up on unanswered resolutions and drops expired mappings.
  void expire(TimeNs now);
  // No timed work is due before this (kNever: none).
  TimeNs next_timer() const { return next_event_; }

  // As of the last next_request()/expire(): an expired mapping reads reachable
  // until then (lookup() already refuses it).
  NeighborState state(uint32_t ip) const;
  const Neighbor* find(uint32_t ip) const;
  uint32_t size() const { return count_; }
  uint32_t capacity() const { return static_cast<uint32_t>(entries_.size()); }
  const NeighborConfig& config() const { return cfg_; }
  const NeighborStats& stats() const { return stats_; }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};

  uint32_t home_slot(uint32_t ip) const;
  uint32_t find_slot(uint32_t ip) const;  // slot holding ip, or kEmpty
  Neighbor* find_mut(uint32_t ip);
  // nullptr when full (counted). may_evict (a new resolution of ours): a
  // full table makes room (evict).
  Neighbor* insert(uint32_t ip, TimeNs now, bool may_evict = false);
  void erase_slot(uint32_t slot);
  TimeNs due(const Neighbor& n) const;
  void note(const Neighbor& n);  // lowers next_event_ to n's deadline
  // The timed work; when want != nullptr, also takes one due request.
  bool run_timers(TimeNs now, uint32_t* want, MacAddr* unicast_to = nullptr,
                  bool* unicast = nullptr);
  // Frees an entry for a new resolution in a full table: a failed one, else
  // the learned mapping that expires first. False when all are static or
  // being resolved.
  bool evict(TimeNs now);
  void confirm(Neighbor& n, const MacAddr& mac, TimeNs now);

  NeighborConfig cfg_;
  std::vector<Neighbor> entries_;  // capacity; state kUnknown = free
  std::vector<uint32_t> free_;     // indices of free entries
  std::vector<uint32_t> slots_;    // hash index: entry index or kEmpty; power of two
  uint32_t shift_ = 0;             // 32 - log2(slots_.size())
  uint32_t count_ = 0;
  TimeNs next_event_ = kNever;  // never later than the earliest due() of an entry
  NeighborStats stats_;
};

struct ArpConfig {
  MacAddr mac{};
  uint32_t ip = 0;  // host order
  // Peers outside ip/prefix_len are reached through the gateway. 0: no
  // router, every peer is on-link.
  uint32_t gateway = 0;
  uint8_t prefix_len = 32;
  uint32_t capacity = 256;  // neighbour entries
  NeighborConfig neighbor;
};

struct ArpStats {
  uint64_t rx_frames = 0;
  std::array<uint64_t, static_cast<size_t>(ArpError::kCount)> errors{};
  uint64_t replies_sent = 0;
  uint64_t requests_sent = 0;
  // Valid ARP that needed nothing from us: requests for other addresses,
  // replies to others about hosts we do not know, our own frames looped back.
  uint64_t ignored = 0;
  uint64_t bad_sender = 0;         // multicast or zero sender MAC
  uint64_t address_conflicts = 0;  // another host claims our IP
  uint64_t reply_no_buffer = 0;    // a reply was due but cap < kArpFrameSize
  uint64_t errors_for(ArpError e) const { return errors[static_cast<size_t>(e)]; }
};

// The ARP engine of one endpoint. The engine calls on_frame() for every
// received ARP frame and poll() once per loop (or at next_timer()).
//
//   uint32_t hop = arp.next_hop(peer_ip);
//   if (!arp.lookup(hop, now, &mac)) {
//     if (arp.state(hop) == NeighborState::kFailed) -> "no ARP reply from hop"
//     else arp.resolve(hop, now);  // then keep polling
//   }
class Arp {
 public:
  explicit Arp(const ArpConfig& cfg);

  // Handles one received frame. Returns the length of a reply written to
  // reply_buf when the frame is a request for our IP, else 0. Only replies
  // to our own requests change the table (NeighborTable::on_reply), and a
  // request from a neighbour we are resolving; any other request, a
  // gratuitous ARP or a reply nobody asked for changes nothing,
  // so a host on the segment can neither redirect our traffic with one
  // frame nor fill the table.
  size_t on_frame(const uint8_t* frame, size_t len, TimeNs now, uint8_t* reply_buf, size_t cap);
  // Writes at most one due request (resolution, retry or refresh) and returns
  // its length; 0 when none is due. Call until it returns 0.
  size_t poll(TimeNs now, uint8_t* buf, size_t cap);
  // A gratuitous ARP for our address (at start-up, or after a MAC change).
  size_t announce(uint8_t* buf, size_t cap) const {
    return build_gratuitous_arp(buf, cap, cfg_.mac, cfg_.ip);
  }
  TimeNs next_timer() const { return table_.next_timer(); }

  // The neighbour whose MAC frames to `peer_ip` carry: the peer itself when
  // it is on-link, else the gateway.
  uint32_t next_hop(uint32_t peer_ip) const;
  bool on_link(uint32_t ip) const;

  bool lookup(uint32_t ip, TimeNs now, MacAddr* out) { return table_.lookup(ip, now, out); }
  bool resolve(uint32_t ip, TimeNs now) { return table_.resolve(ip, now); }
  NeighborState state(uint32_t ip) const { return table_.state(ip); }
  NeighborTable& neighbors() { return table_; }
  const NeighborTable& neighbors() const { return table_; }

  const ArpConfig& config() const { return cfg_; }
  const ArpStats& stats() const { return stats_; }

 private:
  ArpConfig cfg_;
  uint32_t netmask_ = 0;
  NeighborTable table_;
  ArpStats stats_;
};

}  // namespace braid::net

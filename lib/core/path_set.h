// The paths of one connection: every entropy (UDP source port) it sprays
// over and all that is known per entropy. It chooses the entropy of each
// packet (new or retransmitted) and of each ACK/NACK, and learns from what
// comes back on an entropy: ACKs, RTT samples, ECN echoes and losses (by
// inference, trim NACK or timeout). It also keeps the per-entropy send
// sequences that loss inference reads: one entropy is one path through an
// ECMP fabric, and a path keeps order.
//
// How a packet's entropy is chosen is the policy's (paths/: round robin,
// REPS, bitmap penalty; registered in paths/registry.h), held in a variant
// (a switch, no virtual call). What the adaptive policies share is kept
// here: each entropy has a state, as MRC's paths do: GOOD, or ASSUMED_BAD
// after a timeout on it or kBadAfter losses in a row with no delivery
// between. Exploring skips a bad entropy; once its probe time comes, one
// packet goes on it as a probe. A probe delivered revives it; a probe lost
// puts it back to sleep twice as long (up to kMaxBackoff times). An
// entropy whose smoothed RTT is kSlowFactor times the median of its
// connection's is SKIPped the same way (its packets queue somewhere the
// others do not); its probe revives it if delivered within half that.
// When every entropy is bad or skipped, they are used in turn anyway (the
// backup: a connection never stops sending for want of a path).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

#include "core/path_types.h"
#include "core/paths/registry.h"
#include "core/types.h"

namespace braid {

inline constexpr size_t kPathPolicyCount = std::variant_size_v<PathPolicies>;
// A policy's name (its kName), "" for a number no policy has.
std::string_view path_policy_name(PathPolicy p);
// The policy of that name, if one has it.
std::optional<PathPolicy> path_policy_named(std::string_view name);

class PathSet {
 public:
  explicit PathSet(const EntropyConfig& cfg);

  uint16_t count() const { return cfg_.count; }
  PathPolicy policy() const { return cfg_.policy; }
  // The policy's own state (nullptr: another policy), for tests and statistics.
  template <class P>
  const P* policy_state() const {
    return std::get_if<P>(&policy_);
  }
  // The policy keeps path states (REPS, bitmap penalty); round robin keeps
  // none.
  bool adaptive() const { return adaptive_; }
  // The UDP source port of entropy i.
  uint16_t entropy(uint8_t i) const { return paths_[i].port; }
  const EntropyStats& stats(uint8_t i) const { return paths_[i].stats; }
  // (Round robin keeps none: every path is good to it.)
  const PathHealth& health(uint8_t i) const {
    static const PathHealth kGood{};
    return health_.empty() ? kGood : health_[i];
  }
  // How many entropies are assumed bad or skipped now.
  uint16_t bad_count() const { return bad_count_; }
  // Whether the entropy choose() just returned carries a probe of a path
  // set aside (once: it reads as false afterwards).
  bool take_probe() {
    if (!probe_started_) return false;
    probe_started_ = false;
    return true;
  }
  // Losses in a row, with no delivery between, that make an entropy bad.
  static constexpr uint8_t kBadAfter = 3;
  static constexpr uint8_t kMaxBackoff = 6;
  static constexpr uint32_t kSlowFactor = 4;
  // The median smoothed RTT over the entropies with samples (0: fewer than
  // 3 have), refreshed every 32 samples.
  uint32_t median_srtt() const { return median_srtt_; }

  // The entropy of a new packet, and of a retransmission of a packet last
  // sent on `previous`.
  uint8_t choose(TimeNs now) {
    if (!adaptive_) return next_in_turn();
    // A probe that is due goes first: with a full ring REPS may never
    // explore, and a path must get its chance to come back.
    if (now >= next_probe_at_) {
      const int e = take_due_probe(now);
      if (e >= 0) return static_cast<uint8_t>(e);
    }
    return std::visit([&](auto& p) { return p.choose(*this, now); }, policy_);
  }
  uint8_t choose_retransmit(uint8_t previous, TimeNs now) {
    if (!adaptive_) return next_in_turn();
    // A probe resent (a tail-loss probe does not declare it lost first)
    // failed: its ACK, if any, will not say which copy arrived.
    if (health_[previous].probing) probe_failed(previous, now, rtt_hint_);
    return std::visit([&](auto& p) { return p.choose_retransmit(*this, previous, now); }, policy_);
  }
  uint16_t explored() const { return explored_; }
  // The UDP source port of the next ACK or NACK: spread over the entropies
  // in turn, so that no single path carries every acknowledgement.
  uint16_t control_port() {
    const uint16_t p = paths_[ack_cursor_].port;
    ack_cursor_ = ack_cursor_ + 1 == cfg_.count ? 0 : ack_cursor_ + 1;
    return p;
  }

  // A packet leaves on entropy i; returns its sequence number on that path.
  uint32_t on_sent(uint8_t i) {
    ++paths_[i].stats.sent;
    return paths_[i].next_seq++;
  }
  // A packet sent on i with path sequence `seq` is acknowledged, `marked`
  // if it arrived with ECN-CE. Only a packet sent once says which path
  // delivered it (`sent_once`): the ACK of a retransmitted one may be for
  // its first copy, still on the old path.
  // `delay` is from its last transmission to this ACK (an upper bound of
  // its RTT: the receiver may have held the ACK).
  void on_acked(uint8_t i, uint32_t seq, bool sent_once, bool marked, TimeNs now = 0,
                TimeNs delay = 0) {
    Path& p = paths_[i];
    ++p.stats.acked;
    if (!sent_once) return;
    if (static_cast<int32_t>(seq + 1 - p.acked_seq) > 0) p.acked_seq = seq + 1;
    if (adaptive_) adaptive_acked(i, seq, marked, now, delay);
  }
  // How far the packet with path sequence `seq` on i has been overtaken:
  // the packets sent on i after it, up to the latest one acknowledged
  // (0 or less: none of them yet).
  int32_t overtaken_by(uint8_t i, uint32_t seq) const {
    return static_cast<int32_t>(paths_[i].acked_seq - 1 - seq);
  }
  void on_ecn(uint8_t i) { ++paths_[i].stats.ecn_marked; }
  // An ACK named a packet sent once on i, `marked` if it arrived CE. (The
  // other packets an ACK covers say nothing of their marks: a receiver
  // names every marked packet, but not every clean one.)
  void on_named(uint8_t i, bool marked) {
    if (!adaptive_) return;
    std::visit([&](auto& p) { p.on_named(*this, i, marked); }, policy_);
  }
  // The mark rate (PathHealth::mark_rate) at which an entropy marks
  // persistently: REPS does not recycle it even when a packet on it is
  // acknowledged unmarked, so it gets only what exploring gives it.
  static constexpr uint16_t kMarkOne = 1u << 15;
  static constexpr uint16_t kMarkedPersistently = kMarkOne / 2;
  // A packet sent on i is lost; `rtt_ns` is the connection's smoothed RTT
  // (0: none yet). A trimmed packet says the path is congested, not broken;
  // `blame` false: the loss is not the path's doing (a stall of the whole
  // connection), only counted.
  void on_lost(uint8_t i, LossKind why, TimeNs now, TimeNs rtt_ns = 0, bool blame = true) {
    ++paths_[i].stats.lost;
    if (!adaptive_ || !blame) return;
    std::visit([&](auto& p) { p.on_lost(*this, i, why, now); }, policy_);
    if (why == LossKind::kTrimmed) return;
    PathHealth& h = health_[i];
    if (h.losses_in_row < 255) ++h.losses_in_row;
    if (rtt_ns != 0) rtt_hint_ = rtt_ns;
    if (h.state != PathState::kGood) {
      if (h.probing) probe_failed(i, now, rtt_hint_);  // sleep longer
      return;
    }
    if (why == LossKind::kTimeout || h.losses_in_row >= kBadAfter) {
      set_aside(i, PathState::kAssumedBad, now + probe_interval(rtt_ns));
    }
  }
  // An RTT sample from the packet an ACK named, sent on i; `late_ns` is its
  // lateness (EntropyStats::late_ns).
  void on_rtt(uint8_t i, uint64_t rtt_ns, TimeNs now = 0, TimeNs late_ns = 0);
  // The adaptive policies' part of on_acked, out of line: round robin's
  // ACKs stay small.
  void adaptive_acked(uint8_t i, uint32_t seq, bool marked, TimeNs now, TimeNs delay);

  // Bytes of per-entropy state (for the connection's memory footprint).
  size_t memory_footprint() const {
    return paths_.capacity() * sizeof(Path) + health_.capacity() * sizeof(PathHealth);
  }

  // --- For the policies (paths/) ---
  // The next entropy in turn (counted as explored by an adaptive policy).
  uint8_t next_in_turn() {
    const uint8_t i = static_cast<uint8_t>(cursor_);
    cursor_ = cursor_ + 1 == cfg_.count ? 0 : cursor_ + 1;
    if (adaptive_) ++explored_;
    return i;
  }
  // The next entropy to explore, other than `avoid` (-1: none): the next
  // in turn that is good and that the policy does not pass over, or bad
  // with its probe due (it carries the probe) if `probe` allows. If all
  // are bad and none is due, the next in turn.
  uint8_t explore(TimeNs now, int avoid = -1, bool probe = true) {
    if (bad_count_ != 0 ||
        std::visit([&](const auto& p) { return p.passing_any(*this); }, policy_)) {
      for (uint16_t n = 0; n < cfg_.count; ++n) {
        const uint8_t i = next_in_turn();
        if (i == avoid) continue;
        PathHealth& h = health_[i];
        if (h.state == PathState::kGood) {
          if (std::visit([&](auto& p) { return p.passes_over(*this, i); }, policy_)) continue;
          return i;
        }
        if (probe && !h.probing && now >= h.probe_at) {
          start_probe(i);
          refresh_next_probe();
          return i;
        }
      }
    }
    const uint8_t e = next_in_turn();
    return e == avoid ? next_in_turn() : e;
  }
  // Keeps marked_count(), the entropies marking persistently, with it.
  void set_mark_rate(uint8_t i, uint16_t rate) {
    uint16_t& r = health_[i].mark_rate;
    marked_count_ += (rate >= kMarkedPersistently) - (r >= kMarkedPersistently);
    r = rate;
  }
  uint16_t marked_count() const { return marked_count_; }

 private:
  struct Path {
    EntropyStats stats;
    uint32_t next_seq = 0;   // path sequence of the next packet sent on it
    uint32_t acked_seq = 0;  // highest acknowledged path sequence + 1
    uint16_t port = 0;
  };
  TimeNs probe_interval(TimeNs rtt_ns) const {
    return rtt_ns * 4 > cfg_.probe_after_ns ? rtt_ns * 4 : cfg_.probe_after_ns;
  }
  // A good entropy goes bad or skipped; its first probe at `probe_at`.
  void set_aside(uint8_t i, PathState state, TimeNs probe_at) {
    PathHealth& h = health_[i];
    h.state = state;
    h.probing = false;
    h.revive_seq = paths_[i].next_seq;  // what it delivers from here on counts
    h.probe_at = probe_at;
    next_probe_at_ = std::min(next_probe_at_, probe_at);
    ++bad_count_;
    std::visit([&](auto& p) { p.on_set_aside(i); }, policy_);
  }
  // Its probe failed (lost, resent, or delivered still slow): the next one
  // waits twice as long, from an interval scaled by `rtt_ns`.
  void probe_failed(uint8_t i, TimeNs now, TimeNs rtt_ns) {
    PathHealth& h = health_[i];
    h.probing = false;
    if (h.backoff < kMaxBackoff) ++h.backoff;
    h.probe_at = now + (probe_interval(rtt_ns) << h.backoff);
    next_probe_at_ = std::min(next_probe_at_, h.probe_at);
  }
  // The next packet on i is its probe.
  void start_probe(uint8_t i) {
    probe_started_ = true;
    health_[i].probing = true;
    health_[i].revive_seq = paths_[i].next_seq;  // that packet's path sequence
  }
  // The first bad or skipped entropy whose probe is due, now probing; -1 if
  // none (next_probe_at_ was early: it is recomputed).
  int take_due_probe(TimeNs now) {
    int due = -1;
    for (uint16_t i = 0; i < cfg_.count; ++i) {
      PathHealth& h = health_[i];
      if (h.state != PathState::kGood && !h.probing && now >= h.probe_at) {
        start_probe(static_cast<uint8_t>(i));
        due = i;
        break;
      }
    }
    refresh_next_probe();
    return due;
  }
  void refresh_next_probe() {
    next_probe_at_ = kNever;
    if (bad_count_ == 0) return;
    for (const PathHealth& h : health_) {
      if (h.state != PathState::kGood && !h.probing)
        next_probe_at_ = std::min(next_probe_at_, h.probe_at);
    }
  }

  EntropyConfig cfg_;
  PathPolicies policy_;
  bool adaptive_ = false;
  uint16_t cursor_ = 0;
  uint16_t ack_cursor_ = 0;
  std::vector<Path> paths_;
  // The adaptive policies' view of each path, apart: round robin's
  // per-packet work touches only paths_.
  std::vector<PathHealth> health_;
  uint16_t explored_ = 0;
  uint16_t bad_count_ = 0;     // assumed bad or skipped
  uint16_t marked_count_ = 0;  // mark_rate at kMarkedPersistently or above
  uint32_t median_srtt_ = 0;
  bool probe_started_ = false;     // start_probe since the last take_probe
  TimeNs next_probe_at_ = kNever;  // no later than any bad path's probe_at
  TimeNs rtt_hint_ = 0;            // the connection's smoothed RTT, as on_lost last gave it
  uint8_t samples_to_median_ = 32;
  void update_median();
};

static_assert(sizeof(EntropyStats) == 32);

}  // namespace braid

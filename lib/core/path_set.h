// The paths of one connection: every entropy (UDP source port) it sprays
// over and all that is known per entropy. It chooses the entropy of each
// packet (new or retransmitted) and of each ACK/NACK, and learns from what
// comes back on an entropy: ACKs, RTT samples, ECN echoes and losses (by
// inference, trim NACK or timeout). It also keeps the per-entropy send
// sequences that loss inference reads: one entropy is one path through an
// ECMP fabric, and a path keeps order.
//
// The policy is a switch, not a virtual call:
// - round robin (oblivious): every entropy in turn;
// - REPS (recycled entropy packet spraying, arXiv 2407.21625): an entropy
//   whose packet was acknowledged without an ECN mark is used again (a ring
//   of them); when none is waiting, the next entropy in turn is explored.
//   Congested, degraded or dead paths are simply not recycled. After a
//   timeout exploring stops for a while (the failure may be anywhere):
//   the last entropy known good is used when the ring is empty.
//   Each entropy also has a state, as MRC's paths do: GOOD, or ASSUMED_BAD
//   after a timeout on it or kBadAfter losses in a row with no delivery
//   between. Exploring skips a bad entropy; once its probe time comes, one
//   packet goes on it as a probe. A probe delivered revives it; a probe lost
//   puts it back to sleep twice as long (up to kMaxBackoff times). An
//   entropy whose smoothed RTT is kSlowFactor times the median of its
//   connection's is SKIPped the same way (its packets queue somewhere the
//   others do not); its probe revives it if delivered within half that.
//   When every entropy is bad or skipped, they are used in turn anyway (the
//   backup: a connection never stops sending for want of a path).
// - bitmap penalty: every entropy in turn, but one with a penalty is passed
//   over, and each pass takes one off it. An ECN-marked packet adds 1, a
//   trimmed one (NACK) 4, as UET's bitmap does, and a loss inferred on it
//   4 (Braid's sender infers what a UET receiver would NACK), up to 15: a
//   path that marks everything it carries gets about half its share, one
//   that trims or loses much less. Where UET adds 15 for a timeout, the
//   path is set aside as REPS's path states do (and so are dead and slow
//   paths, with probes). Unlike REPS it remembers no good entropy: it
//   spreads over every path not penalised, where REPS concentrates on the
//   entropies that came back clean.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/types.h"

namespace braid {

enum class PathPolicy : uint8_t {
  kRoundRobin,  // oblivious: every entropy in turn
  kReps,        // recycle entropies that came back unmarked
  kBitmap,      // in turn, passing over entropies penalised by ECN, NACK, loss
};

struct EntropyConfig {
  PathPolicy policy = PathPolicy::kRoundRobin;
  uint16_t count = 16;         // 1..256; 1 = single path (RoCEv2-like)
  uint16_t base_port = 49152;  // entropy i is base_port + i * stride (mod 2^14) | 0xc000
  uint16_t stride = 1;
  TimeNs freeze_ns = 100'000;  // REPS: no exploring for this long after a timeout
  // REPS: an entropy assumed bad is first probed again after this, or after
  // four of the connection's RTTs if that is longer.
  TimeNs probe_after_ns = 100'000;
};

// kSkip: delivers, but far slower than the connection's other paths (a
// rate-limited or congested link with no ECN to say so).
enum class PathState : uint8_t { kGood, kSkip, kAssumedBad };

// Why a packet was declared lost.
enum class LossKind : uint8_t { kInferred, kTrimmed, kTimeout };

// Per-entropy counters; 32 bytes each.
struct EntropyStats {
  uint32_t sent = 0;
  uint32_t acked = 0;
  uint32_t ecn_marked = 0;
  uint32_t lost = 0;  // declared lost (gap on this entropy, NACK or timeout)
  // (REPS: how often it was recycled is sent - explored.)
  uint32_t rtt_samples = 0;
  uint32_t srtt_ns = 0;     // EWMA 1/8
  uint32_t min_rtt_ns = 0;  // 0 until the first sample
  // Smoothed (EWMA 1/8, with the RTT samples) lateness: when an ACK names
  // a packet sent on it, how much later than that packet the newest packet
  // already acknowledged was sent (0: none was). A path slower than the
  // others shows here however much the hosts' own queues add to every RTT.
  uint32_t late_ns = 0;
};

// What the adaptive policy knows of an entropy's health; 24 bytes.
struct PathHealth {
  PathState state = PathState::kGood;
  uint8_t losses_in_row = 0;  // since the last packet it delivered
  uint8_t backoff = 0;        // the probe interval is doubled this many times
  bool probing = false;       // a probe is out on it
  uint32_t revive_seq = 0;    // a packet it delivers from this path sequence on revives it
  TimeNs probe_at = 0;        // when it may carry its next probe
  // EWMA (1/8) of ECN-CE among its packets that ACKs named, in 1/32768ths.
  uint16_t mark_rate = 0;
  // Bitmap penalty: how many more turns it is passed over.
  uint8_t penalty = 0;
};

class PathSet {
 public:
  explicit PathSet(const EntropyConfig& cfg);

  uint16_t count() const { return cfg_.count; }
  PathPolicy policy() const { return cfg_.policy; }
  // REPS and bitmap penalty keep path states; round robin keeps none.
  bool adaptive() const { return cfg_.policy != PathPolicy::kRoundRobin; }
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
    if (!adaptive()) return next_in_turn();
    // A probe that is due goes first: with a full ring REPS may never
    // explore, and a path must get its chance to come back.
    if (now >= next_probe_at_) {
      const int e = take_due_probe(now);
      if (e >= 0) return static_cast<uint8_t>(e);
    }
    if (cfg_.policy == PathPolicy::kReps) {
      while (ring_count_ > 0) {
        const uint8_t e = take_recycled();
        if (health_[e].state == PathState::kGood) return e;  // not gone bad since
      }
      if (now < frozen_until_ && has_good_) return last_good_;
    }
    return explore(now);
  }
  uint8_t choose_retransmit(uint8_t previous, TimeNs now) {
    if (!adaptive()) return next_in_turn();
    // A probe resent (a tail-loss probe does not declare it lost first)
    // failed: its ACK, if any, will not say which copy arrived.
    if (health_[previous].probing) probe_failed(previous, now, rtt_hint_);
    if (cfg_.policy == PathPolicy::kReps) {
      // Not the path that lost it, if another is known good.
      for (uint16_t n = ring_count_; n > 0; --n) {
        const uint8_t e = take_recycled();
        if (health_[e].state != PathState::kGood) continue;
        if (e != previous || cfg_.count == 1) return e;
        recycle(e);
      }
      if (now < frozen_until_ && has_good_ && last_good_ != previous) return last_good_;
    }
    // A retransmission never carries a probe: the ACK of a packet sent twice
    // does not say which copy arrived, so the probe would never be judged
    // and its path never probed again.
    return explore(now, cfg_.count > 1 ? previous : -1, false);
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
    if (adaptive()) adaptive_acked(i, seq, marked, now, delay);
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
    if (cfg_.policy == PathPolicy::kBitmap) {
      if (marked) penalize(i, kEcnPenalty);
      return;
    }
    if (cfg_.policy != PathPolicy::kReps) return;
    const uint16_t r = health_[i].mark_rate;
    set_mark_rate(i, static_cast<uint16_t>(r - (r >> 3) + (marked ? (kMarkOne >> 3) : 0)));
  }
  // Marked this often (of the packets ACKs name), an entropy is not
  // recycled even when a packet on it is acknowledged unmarked: a path that
  // marks persistently gets only what exploring gives it.
  static constexpr uint16_t kMarkOne = 1u << 15;
  static constexpr uint16_t kMarkedPersistently = kMarkOne / 2;
  // Bitmap penalty: turns passed over for a mark, a trim, an inferred loss.
  static constexpr uint8_t kEcnPenalty = 1, kTrimPenalty = 4, kLossPenalty = 4;
  static constexpr uint8_t kMaxPenalty = 15;
  // A packet sent on i is lost; `rtt_ns` is the connection's smoothed RTT
  // (0: none yet). A trimmed packet says the path is congested, not broken;
  // `blame` false: the loss is not the path's doing (a stall of the whole
  // connection), only counted.
  void on_lost(uint8_t i, LossKind why, TimeNs now, TimeNs rtt_ns = 0, bool blame = true) {
    ++paths_[i].stats.lost;
    if (!adaptive() || !blame) return;
    if (cfg_.policy == PathPolicy::kBitmap && why != LossKind::kTimeout)
      penalize(i, why == LossKind::kTrimmed ? kTrimPenalty : kLossPenalty);
    if (why == LossKind::kTrimmed) return;
    if (why == LossKind::kTimeout) {
      frozen_until_ = now + cfg_.freeze_ns;
      if (has_good_ && last_good_ == i) has_good_ = false;
    }
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
  // How many entropies have a bitmap penalty now.
  uint16_t penalized_count() const { return penalized_count_; }

  // Bytes of per-entropy state (for the connection's memory footprint).
  size_t memory_footprint() const {
    return paths_.capacity() * sizeof(Path) + health_.capacity() * sizeof(PathHealth);
  }

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
    if (has_good_ && last_good_ == i) has_good_ = false;
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
  // REPS's next entropy to explore, other than `avoid` (-1: none): the
  // next in turn that is good, or bad with its probe due (it carries the
  // probe) if `probe` allows. If all are bad and none is due, the next in
  // turn.
  // An entropy that marks persistently is passed over too, and its mark
  // rate decays by an eighth each time: it is explored again after a few
  // turns, and passed over again if what it carries comes back marked.
  uint8_t explore(TimeNs now, int avoid = -1, bool probe = true) {
    if (bad_count_ != 0 || marked_count_ != 0 || penalized_count_ != 0) {
      for (uint16_t n = 0; n < cfg_.count; ++n) {
        const uint8_t i = next_in_turn();
        if (i == avoid) continue;
        PathHealth& h = health_[i];
        if (h.state == PathState::kGood) {
          if (h.penalty != 0) {
            if (--h.penalty == 0) --penalized_count_;
            continue;
          }
          if (h.mark_rate < kMarkedPersistently) return i;
          set_mark_rate(i, static_cast<uint16_t>(h.mark_rate - (h.mark_rate >> 3)));
          continue;
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
  void penalize(uint8_t i, uint8_t by) {
    uint8_t& p = health_[i].penalty;
    if (p == 0) ++penalized_count_;
    p = static_cast<uint8_t>(std::min<uint32_t>(kMaxPenalty, uint32_t{p} + by));
  }
  // Keeps marked_count_, the entropies marking persistently, with it.
  void set_mark_rate(uint8_t i, uint16_t rate) {
    uint16_t& r = health_[i].mark_rate;
    marked_count_ += (rate >= kMarkedPersistently) - (r >= kMarkedPersistently);
    r = rate;
  }
  uint8_t next_in_turn() {
    const uint8_t i = static_cast<uint8_t>(cursor_);
    cursor_ = cursor_ + 1 == cfg_.count ? 0 : cursor_ + 1;
    if (cfg_.policy != PathPolicy::kRoundRobin) ++explored_;
    return i;
  }
  // REPS's ring of entropies to use again; the oldest is dropped when full.
  static constexpr uint16_t kRing = 16;
  void recycle(uint8_t i) {
    if (ring_count_ == kRing) {
      ring_head_ = (ring_head_ + 1) % kRing;
      --ring_count_;
    }
    ring_[(ring_head_ + ring_count_) % kRing] = i;
    ++ring_count_;
  }
  uint8_t take_recycled() {
    const uint8_t i = ring_[ring_head_];
    ring_head_ = (ring_head_ + 1) % kRing;
    --ring_count_;
    return i;
  }

  EntropyConfig cfg_;
  uint16_t cursor_ = 0;
  uint16_t ack_cursor_ = 0;
  std::vector<Path> paths_;
  // REPS's view of each path, apart: round robin's per-packet work touches
  // only paths_.
  std::vector<PathHealth> health_;
  uint8_t ring_[kRing] = {};
  uint16_t ring_head_ = 0, ring_count_ = 0;
  uint8_t last_good_ = 0;
  bool has_good_ = false;
  uint16_t explored_ = 0;
  uint16_t bad_count_ = 0;        // assumed bad or skipped
  uint16_t marked_count_ = 0;     // mark_rate at kMarkedPersistently or above
  uint16_t penalized_count_ = 0;  // penalty above 0
  uint32_t median_srtt_ = 0;
  bool probe_started_ = false;     // start_probe since the last take_probe
  TimeNs next_probe_at_ = kNever;  // no later than any bad path's probe_at
  TimeNs rtt_hint_ = 0;            // the connection's smoothed RTT, as on_lost last gave it
  uint8_t samples_to_median_ = 32;
  void update_median();
  TimeNs frozen_until_ = 0;
};

static_assert(sizeof(EntropyStats) == 32);

}  // namespace braid

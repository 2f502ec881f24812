// Receiver-driven credit (EQDS-like): a receiver paces the data its senders
// may send at the rate of its own link, so an incast of any width arrives at
// that rate instead of as a queue.
//
// - The sender's half (CreditSender, one per connection): the credit the
//   peer granted and what it spent, the speculative allowance a connection
//   may send from idle before any credit comes back (one BDP: the first RTT
//   is not wasted), and what it has asked for. Data and retransmissions are
//   charged their whole frame. READ responses need none: the READ asked
//   for them.
// - The receiver's half: per connection (CreditGrantor) the peer's demand,
//   what was granted and how much of it is unused; per endpoint
//   (CreditPacer: its link is shared by every connection on it) the turns:
//   connections with demand take turns, a quantum each, at the link's rate. Data that arrives
//   unscheduled (sent from a speculative allowance) pushes the next grant back by its own time on
//   the link, so speculation and grants together fill the link and no more.
//
// Counters on the wire are cumulative bytes modulo 2^32 (CREDIT and
// CREDIT_REQ carry them in the CTRL payload), so a lost or duplicated
// control packet is repaired by the next one.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "core/ready_queue.h"
#include "core/timing_wheel.h"
#include "core/types.h"

namespace braid {

// a is after b, modulo 2^32.
inline bool credit_after(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b) > 0;
}

class CreditSender {
 public:
  explicit CreditSender(uint32_t speculative_bytes = 0)
      : speculative_(speculative_bytes), spec_left_(speculative_bytes) {}

  // Credit granted and not yet spent (negative: spent ahead, one packet
  // may overdraw).
  int64_t available() const { return static_cast<int32_t>(granted_ - used_); }
  uint32_t speculative_left() const { return spec_left_; }
  // A retransmission needs credit; a new packet may also go speculatively.
  bool may_send(bool retx) const { return available() > 0 || (!retx && spec_left_ > 0); }
  // Charges a packet of `bytes` on the wire. Returns true when it went
  // unscheduled (from the speculative allowance): the receiver must know.
  bool spend(uint32_t bytes) {
    if (available() > 0) {
      used_ += bytes;
      return false;
    }
    spec_left_ = bytes >= spec_left_ ? 0 : spec_left_ - bytes;
    return true;
  }
  // A CREDIT from the receiver: its cumulative grant. False if it says
  // nothing new (a duplicate or one overtaken).
  bool on_grant(uint32_t cumulative) {
    if (!credit_after(cumulative, granted_)) return false;
    granted_ = cumulative;
    return true;
  }
  // The connection went idle (nothing in flight or queued): credit left
  // over is given back (it was for a backlog that is gone) and the
  // speculative allowance is restored for the next burst.
  void on_idle() {
    if (available() > 0) used_ = granted_;
    spec_left_ = speculative_;
  }
  // What to ask the receiver for: everything spent, plus the bytes queued
  // for retransmission, plus new bytes beyond the speculative allowance.
  uint32_t target(uint64_t new_bytes, uint64_t retx_bytes) const {
    const uint64_t beyond = new_bytes > spec_left_ ? new_bytes - spec_left_ : 0;
    return used_ + static_cast<uint32_t>(std::min<uint64_t>(beyond + retx_bytes, 1u << 30));
  }
  // A CREDIT_REQ is due: the target moved at least `min_step` beyond what
  // was last asked, or by anything once all that was asked is granted.
  bool request_due(uint32_t target, uint32_t min_step) const {
    if (!credit_after(target, asked_)) return false;
    return target - asked_ >= min_step || !credit_after(asked_, granted_);
  }
  void asked(uint32_t target) { asked_ = target; }
  uint32_t granted() const { return granted_; }
  uint32_t used() const { return used_; }
  uint32_t last_asked() const { return asked_; }

 private:
  uint32_t speculative_;
  uint32_t spec_left_;
  uint32_t granted_ = 0;
  uint32_t used_ = 0;
  uint32_t asked_ = 0;
};

// Settings of an endpoint's credit pacer.
struct CreditPacerConfig {
  uint64_t rate_bps = 0;          // the receiver's link (frame bits); 0: the first requester's
  uint32_t quantum_bytes = 8192;  // granted per turn with 8 or more connections waiting
  // With fewer, a turn is 8 / n quanta (a lone sender: 8): fewer CREDITs
  // for the same rate where fairness asks for no small turns.
  uint32_t max_turn_quanta = 8;
  // Pacers that grant on one link (the engines of a port, each its own
  // thread) share the time of the next grant here, so that together they
  // grant the link's rate, and one of them alone all of it. nullptr: this
  // pacer's own.
  std::atomic<TimeNs>* shared_next_at = nullptr;
};

struct CreditPacerStats {
  uint64_t grants = 0;  // turns that granted something
  uint64_t granted_bytes = 0;
  uint64_t unscheduled_bytes = 0;  // arrived without credit: pushed grants back
  uint64_t marked = 0;             // credited data that arrived CE-marked
  uint64_t trimmed = 0;            // ... or trimmed
};

class CreditPacer {
 public:
  // grant(owner, id, max_bytes, now): connection `id` takes up to max_bytes
  // of credit; returns what it took (0: it wants none) and whether it still
  // wants more (`more`).
  using GrantFn = uint32_t (*)(void* owner, uint16_t id, uint32_t max_bytes, bool* more,
                               TimeNs now);

  CreditPacer(const CreditPacerConfig& cfg, TimingWheel* wheel, GrantFn fn, void* owner);
  CreditPacer(const CreditPacer&) = delete;
  CreditPacer& operator=(const CreditPacer&) = delete;
  ~CreditPacer();

  void reserve_ids(size_t ids) { active_.reserve_ids(ids); }
  // Connection `id` has demand: it joins the turns; the pacer starts if idle.
  // `link_bps`: its link's rate, used when the pacer has none configured.
  void want(uint16_t id, uint64_t link_bps, TimeNs now);
  void remove(uint16_t id) { active_.remove(id); }
  // Data that connection `id`'s peer sent without credit arrived. When
  // other connections are waiting for turns, the link carried it in their
  // place, so the next grant waits for its time. A lone sender's
  // speculation covers the round trip before its first grant arrives: its
  // grants collide with nothing, and holding them back would leave a gap.
  // `others`: other connections wait behind `id` (its group's, when turns
  // are a group's): it is not alone then.
  void on_unscheduled(uint16_t id, uint32_t frame_bytes, TimeNs now, bool others = false);
  // Credited data arrived marked ECN-CE, or trimmed: a queue stands before
  // this link (grants and speculation overlapped, or other traffic shares
  // it). The next grant waits a quarter of a marked packet's time, a whole
  // trimmed packet's, so the queue drains instead of standing forever at
  // a rate that matches the link exactly.
  void on_congestion(uint32_t frame_bytes, bool trimmed, TimeNs now);
  // Grants every turn due by now (called by the timer).
  void run(TimeNs now);

  bool active() const { return !active_.empty(); }
  uint64_t rate_bps() const { return rate_; }
  const CreditPacerStats& stats() const { return stats_; }

 private:
  static void thunk(Timer* t, TimeNs now);
  // A turn's bytes with the connections waiting now.
  uint32_t turn_bytes() const;
  // Shared mode (CreditPacerConfig::shared_next_at): books this pacer's
  // next turn at the end of the link's schedule, and grants it when due.
  void book(TimeNs now);
  void run_shared(TimeNs now);
  TimeNs time_of(uint64_t bytes) const {
    return rate_ == 0 ? 0 : static_cast<TimeNs>(bytes * 8'000'000'000ull / rate_);
  }
  // The next grant's time (this pacer's, or the one its link's pacers
  // share) becomes max(it, floor) + add.
  void push_next(TimeNs floor, TimeNs add) {
    if (shared_ == nullptr) {
      next_at_ = std::max(next_at_, floor) + add;
      return;
    }
    TimeNs cur = shared_->load(std::memory_order_relaxed);
    while (!shared_->compare_exchange_weak(cur, std::max(cur, floor) + add,
                                           std::memory_order_relaxed)) {
    }
  }

  CreditPacerConfig cfg_;
  TimingWheel* wheel_;
  GrantFn grant_;
  void* owner_;
  uint64_t rate_;
  ReadyQueue active_;
  Timer timer_;
  TimeNs next_at_ = 0;           // the next grant may go at this time
  std::atomic<TimeNs>* shared_;  // ... or this (CreditPacerConfig::shared_next_at)
  TimeNs booked_ = kNever;       // shared mode: this pacer's turn starts then
  uint32_t booked_turn_ = 0;     // ... and is this many bytes
  CreditPacerStats stats_;
};

// The receiver's half for one connection: the peer's cumulative demand (its
// CREDIT_REQs), the cumulative grant (our CREDITs) and the grants not yet
// used. A peer holding `cap` bytes of unused grants gets no more turns until
// its data arrives, or until it asks again: at once while its credited data
// still arrives, otherwise after a wait that doubles each time in a row up
// to the RTO's ceiling (so a lost link that comes back recovers, and a liar
// gets a cap's worth per rto_max at most).
class CreditGrantor {
 public:
  // The pacer whose turns this connection takes, and its id there; without
  // one every demand is granted at once. `join(ctx)`, if given, runs each
  // time before the pacer is told of demand: where turns are a group's
  // (a peer's connections), the connection joins the group's list first.
  void bind(CreditPacer* pacer, uint16_t id, uint64_t link_bps, void (*join)(void*) = nullptr,
            void* ctx = nullptr) {
    pacer_ = pacer;
    id_ = id;
    link_bps_ = link_bps;
    join_ = join;
    ctx_ = ctx;
  }
  // The peer asks for credit, and a pacer shares the link: what arrives
  // from it tells the pacer (on_unscheduled, on_congestion).
  bool paced() const { return asked_ && pacer_ != nullptr; }
  CreditPacer* pacer() const { return pacer_; }
  uint16_t id() const { return id_; }

  struct Request {
    bool forgiven = false;  // the cap on unused grants was lifted
    uint32_t granted = 0;   // granted at once (no pacer)
  };
  // A CREDIT_REQ naming the peer's cumulative demand.
  Request on_request(uint32_t demand, TimeNs rto, TimeNs rto_max, TimeNs now);
  // One of the pacer's turns: up to max_bytes, in whole frames of
  // `frame` bytes, of what the peer asked for and was not granted. Returns
  // the bytes granted; *more: demand is left; *capped: the peer holds
  // `cap` unused (0: no cap) and just lost its turns.
  uint32_t grant(uint32_t max_bytes, uint32_t frame, uint32_t cap, bool* more, bool* capped,
                 TimeNs now);
  // New credited data of `frame` bytes arrived from the peer.
  void on_arrival(uint32_t frame, uint32_t cap, TimeNs now);

  // A CREDIT (our cumulative grant) is to go out.
  bool due() const { return due_ || copies_ > 0; }
  // ... and went.
  void sent() {
    if (due_) {
      due_ = false;
    } else if (copies_ > 0) {
      --copies_;
    }
  }
  uint32_t granted() const { return granted_; }
  uint32_t demand() const { return target_; }

 private:
  // Demand waits for the pacer's turns.
  void want(TimeNs now) {
    if (join_ != nullptr) join_(ctx_);
    pacer_->want(id_, link_bps_, now);
  }

  CreditPacer* pacer_ = nullptr;
  uint16_t id_ = 0;
  uint64_t link_bps_ = 0;
  void (*join_)(void*) = nullptr;
  void* ctx_ = nullptr;
  bool asked_ = false;    // the peer asks for credit
  uint32_t target_ = 0;   // what the peer asked for, cumulative
  uint32_t granted_ = 0;  // what we granted it, cumulative
  // Granted and not (yet) arrived as credited data, floored at 0.
  uint32_t unused_ = 0;
  uint32_t arrived_since_forgiven_ = 0;
  TimeNs capped_at_ = 0;
  TimeNs arrival_at_ = 0;  // the peer's last credited data
  uint8_t forgiven_ = 0;   // in a row, without the cap's half arriving
  bool capped_ = false;
  bool due_ = false;
  uint8_t copies_ = 0;  // the CREDIT goes out again this many times
};

}  // namespace braid

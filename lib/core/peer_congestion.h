// What the connections from one endpoint to one peer share: one congestion
// window over the bytes they all have in flight, one pacing clock and
// congestion-control state (CongestionControl), and, as the receiving end,
// one notification point for the CNPs DCQCN asks of it. Several QPs between
// two hosts (a collective library stripes a transfer over them) then take
// one host's share of a bottleneck, not one share each.
//
// As the receiving end of receiver-driven credit, the peer also takes the
// turns of the endpoint's credit pacer as one (its turn id there), and
// passes each turn to its connections that have demand, in turn: a host
// with four QPs to this one gets one host's turns, not four.
//
// A connection whose data waits for the shared window or the pacing clock
// waits here; a window opening (an ACK or a loss on any of them) or the
// pacing timer wakes as many of them, in the order they came, as the window
// has room for. Sans-IO as the rest of the core: timers on the owner's
// TimingWheel, no allocation after the members have joined.
#pragma once

#include <cstdint>
#include <vector>

#include "core/congestion_control.h"
#include "core/timing_wheel.h"
#include "core/types.h"

namespace braid {

class Connection;

class PeerCongestion {
 public:
  // packet_bytes: a full packet as the window counts it (MTU and header charge).
  PeerCongestion(const CcConfig& cfg, uint32_t packet_bytes, TimingWheel* wheel);
  ~PeerCongestion();
  PeerCongestion(const PeerCongestion&) = delete;
  PeerCongestion& operator=(const PeerCongestion&) = delete;

  // Whether a connection with this configuration may share this state.
  bool fits(const CcConfig& cfg, uint32_t packet_bytes) const {
    return cfg == cfg_ && packet_bytes == packet_bytes_;
  }
  // Members: the connections sharing it (their owner keeps it while any is).
  void join(Connection* c);
  void leave(Connection* c);
  size_t members() const { return members_; }

  CongestionControl& cc() { return cc_; }
  const CongestionControl& cc() const { return cc_; }

  // Bytes in flight over every member, as the window counts them.
  uint32_t inflight() const { return inflight_; }
  void add_inflight(uint32_t bytes) { inflight_ += bytes; }
  void sub_inflight(uint32_t bytes) { inflight_ -= bytes; }
  // The window takes `bytes` more (one packet always goes when nothing is
  // in flight).
  bool window_takes(uint32_t bytes) const {
    return inflight_ == 0 || inflight_ + bytes <= cc_.cwnd_bytes();
  }
  bool window_takes_full_packet() const { return window_takes(packet_bytes_); }

  // Pacing (a rate from the algorithm): whether the next data frame must
  // wait; if so `c` waits for the pacing timer. paced(): a frame of
  // frame_len bytes left now.
  bool pacing_holds(Connection* c, TimeNs now);
  void paced(uint32_t frame_len, TimeNs now);
  bool pace_armed() const { return pace_timer_.armed(); }
  TimeNs next_send_at() const { return next_send_at_; }

  // `c` has data the window or the pacing holds back: it is poked when
  // either opens (at most once in the list).
  void wait(Connection* c);
  // `c` waits no more (it went into error, or away).
  void forget(Connection* c) { remove_waiter(c); }
  // Wakes waiters the window has room for (when the pacing timer is not
  // armed). Cheap when nobody waits.
  void wake_if_open() {
    if (waiters_.count > 0 && !waking_) wake();
  }

  // Receiver-driven credit: the peer's id among the pacer's turns.
  void set_turn_id(uint16_t id) { turn_id_ = id; }
  uint16_t turn_id() const { return turn_id_; }
  // `c` has credit demand the pacer's turns serve (at most once in the list).
  void want_turns(Connection* c);
  // Members other than `c` wait for the peer's turns.
  bool others_want_turns(const Connection* c) const;
  // One turn of the pacer, up to max_bytes: a lone member with demand takes
  // it as a connection of its own would (Connection::grant_credit); several
  // share it a packet at a time, in turn (the last may take a packet beyond
  // max_bytes). Returns what was granted; *more: a member still has demand.
  uint32_t take_turn(uint32_t max_bytes, bool* more, TimeNs now);

  // The notification point: whether a CE-marked packet from this peer
  // gets a CNP now (at most one per `interval` for all the members).
  bool cnp_due(TimeNs now, TimeNs interval) {
    if (now < next_cnp_at_) return false;
    next_cnp_at_ = now + interval;
    return true;
  }

 private:
  // Members in first-come order, at most once each (`flag`: whether one is
  // in): a ring with room for every member, grown as they join.
  struct Ring {
    explicit Ring(bool Connection::*f) : flag(f) {}
    bool Connection::*flag;
    std::vector<Connection*> slots;
    size_t head = 0, count = 0;
    void grow(size_t members);
    void push(Connection* c);
    Connection* pop();
    void remove(Connection* c);
  };
  static void pace_thunk(Timer* t, TimeNs now);
  void wake();
  void remove_waiter(Connection* c) { waiters_.remove(c); }

  CcConfig cfg_;
  uint32_t packet_bytes_;
  TimingWheel* wheel_;
  CongestionControl cc_;
  uint32_t inflight_ = 0;
  size_t members_ = 0;
  TimeNs next_send_at_ = 0;
  Timer pace_timer_;
  TimeNs next_cnp_at_ = 0;
  Ring waiters_;  // first come first woken
  bool waking_ = false;
  Ring credit_;  // members with credit demand, in turn
  uint16_t turn_id_ = 0;
};

}  // namespace braid

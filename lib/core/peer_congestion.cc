#include "core/peer_congestion.h"

#include <algorithm>

#include "core/connection.h"

namespace braid {

PeerCongestion::PeerCongestion(const CcConfig& cfg, uint32_t packet_bytes, TimingWheel* wheel)
    : cfg_(cfg),
      packet_bytes_(packet_bytes),
      wheel_(wheel),
      cc_(cfg, packet_bytes),
      waiters_(&Connection::waiting_for_peer_),
      credit_(&Connection::wants_peer_turns_) {
  pace_timer_.fn = &PeerCongestion::pace_thunk;
  pace_timer_.owner = this;
}

PeerCongestion::~PeerCongestion() {
  wheel_->cancel(&pace_timer_);
}

void PeerCongestion::Ring::grow(size_t members) {
  if (slots.size() >= members) return;
  // Room for every member, in order from the head (joining is not the fast
  // path: it allocates when the ring doubles).
  std::vector<Connection*> ring(std::max<size_t>(2 * slots.size(), 4));
  for (size_t i = 0; i < count; ++i) ring[i] = slots[(head + i) % slots.size()];
  slots.swap(ring);
  head = 0;
}

void PeerCongestion::Ring::push(Connection* c) {
  if (c->*flag) return;
  c->*flag = true;
  slots[(head + count) % slots.size()] = c;
  ++count;
}

Connection* PeerCongestion::Ring::pop() {
  Connection* c = slots[head];
  head = (head + 1) % slots.size();
  --count;
  c->*flag = false;
  return c;
}

void PeerCongestion::Ring::remove(Connection* c) {
  if (!(c->*flag)) return;
  size_t kept = 0;
  for (size_t i = 0; i < count; ++i) {
    Connection* x = slots[(head + i) % slots.size()];
    if (x != c) slots[(head + kept++) % slots.size()] = x;
  }
  count = kept;
  c->*flag = false;
}

void PeerCongestion::join(Connection*) {
  ++members_;
  waiters_.grow(members_);
  credit_.grow(members_);
}

void PeerCongestion::leave(Connection* c) {
  waiters_.remove(c);
  credit_.remove(c);
  --members_;
}

void PeerCongestion::wait(Connection* c) {
  waiters_.push(c);
}

void PeerCongestion::want_turns(Connection* c) {
  credit_.push(c);
}

bool PeerCongestion::others_want_turns(const Connection* c) const {
  return credit_.count > (c->wants_peer_turns_ ? 1u : 0u);
}

uint32_t PeerCongestion::take_turn(uint32_t max_bytes, bool* more, TimeNs now) {
  uint32_t granted = 0;
  if (credit_.count == 1) {
    // One member with demand takes the turn, as a connection of its own would.
    Connection* c = credit_.pop();
    bool again = false;
    granted = c->grant_credit(max_bytes, &again, now);
    if (again) credit_.push(c);
  } else {
    // Several share it out a packet at a time, in turn: the peer gets one
    // turn's bytes however many QPs it has, and its QPs equal parts of it.
    // A member that takes nothing (capped, in error) leaves the list, as a
    // connection leaves the pacer's: its next demand brings it back.
    while (credit_.count > 0 && granted < max_bytes) {
      Connection* c = credit_.pop();
      bool again = false;
      granted += c->grant_credit(1, &again, now);  // one packet (Connection::grant_credit)
      if (again) credit_.push(c);
    }
  }
  *more = credit_.count > 0;
  return granted;
}

bool PeerCongestion::pacing_holds(Connection* c, TimeNs now) {
  if (!pace_timer_.armed()) {
    if (now >= next_send_at_) return false;
    wheel_->schedule(&pace_timer_, next_send_at_);
  }
  wait(c);
  return true;
}

void PeerCongestion::paced(uint32_t frame_len, TimeNs now) {
  const uint64_t rate = cc_.pacing_rate_bps();
  const TimeNs gap = uint64_t{frame_len} * 8'000'000'000ull / rate;
  // A timer fires up to a tick late: the next packets may catch up on a
  // little of that (two packets' time), no more, so an idle peer does not
  // bank a burst.
  next_send_at_ = std::max(next_send_at_, now > 2 * gap ? now - 2 * gap : 0) + gap;
  cc_.on_sent(frame_len, now);  // (only paced frames: DCQCN counts them)
}

void PeerCongestion::pace_thunk(Timer* t, TimeNs) {
  static_cast<PeerCongestion*>(t->owner)->wake_if_open();  // the next frame's time has come
}

void PeerCongestion::wake() {
  if (pace_timer_.armed()) return;
  const uint32_t cwnd = cc_.cwnd_bytes();
  if (inflight_ > 0 && inflight_ + packet_bytes_ > cwnd) return;
  // Full packets the window takes now (one at least: with nothing in
  // flight, one always goes).
  const size_t room =
      std::max<size_t>((cwnd > inflight_ ? cwnd - inflight_ : 0) / packet_bytes_, 1);
  // Woken in turn until that many have queued themselves to send. One that
  // cannot send for its own reasons (an RNR wait, the READ limit) does not
  // take another's turn: its own event pokes it. One that finds the window
  // taken again waits anew, behind the others.
  size_t queued = 0;
  waking_ = true;
  for (size_t n = waiters_.count; n > 0 && queued < room; --n) {
    Connection* c = waiters_.pop();
    c->poke();
    if (c->data_queued()) ++queued;
  }
  waking_ = false;
}

}  // namespace braid

#include "core/peer_congestion.h"

#include <algorithm>

#include "core/connection.h"

namespace braid {

PeerCongestion::PeerCongestion(const CcConfig& cfg, uint32_t packet_bytes, TimingWheel* wheel)
    : cfg_(cfg), packet_bytes_(packet_bytes), wheel_(wheel), cc_(cfg, packet_bytes) {
  pace_timer_.fn = &PeerCongestion::pace_thunk;
  pace_timer_.owner = this;
}

PeerCongestion::~PeerCongestion() {
  wheel_->cancel(&pace_timer_);
}

void PeerCongestion::join(Connection*) {
  ++members_;
  if (waiters_.size() < members_) {
    // Room for every member, in order from the head (joining is not the
    // fast path: it allocates when the ring doubles).
    std::vector<Connection*> ring(std::max<size_t>(2 * waiters_.size(), 4));
    for (size_t i = 0; i < count_; ++i) ring[i] = waiters_[(head_ + i) % waiters_.size()];
    waiters_.swap(ring);
    head_ = 0;
  }
}

void PeerCongestion::leave(Connection* c) {
  remove_waiter(c);
  --members_;
}

void PeerCongestion::remove_waiter(Connection* c) {
  if (!c->waiting_for_peer_) return;
  size_t kept = 0;
  for (size_t i = 0; i < count_; ++i) {
    Connection* x = waiters_[(head_ + i) % waiters_.size()];
    if (x != c) waiters_[(head_ + kept++) % waiters_.size()] = x;
  }
  count_ = kept;
  c->waiting_for_peer_ = false;
}

void PeerCongestion::wait(Connection* c) {
  if (c->waiting_for_peer_) return;
  c->waiting_for_peer_ = true;
  waiters_[(head_ + count_) % waiters_.size()] = c;
  ++count_;
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
  for (size_t n = count_; n > 0 && queued < room; --n) {
    Connection* c = waiters_[head_];
    head_ = (head_ + 1) % waiters_.size();
    --count_;
    c->waiting_for_peer_ = false;
    c->poke();
    if (c->data_queued()) ++queued;
  }
  waking_ = false;
}

}  // namespace braid

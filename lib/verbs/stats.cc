// Statistics: a QP's, an entropy's, the port's.
#include "braid/verbs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "verbs/calls.h"
#include "verbs/device_io.h"
#include "verbs/verbs_internal.h"
using namespace braid::calls;

extern "C" {

int braid_query_qp_stats(struct braid_qp* qp, struct braid_qp_stats* out) {
  if (qp == nullptr || out == nullptr) return EINVAL;
  EngineGuard g(qp->context, qp->engine);
  std::memset(out, 0, sizeof(*out));
  if (qp->conn == nullptr) return 0;
  const braid::ConnectionStats& s = qp->conn->stats();
  out->data_packets_sent = s.data_sent;
  out->retransmits = s.retransmits;
  out->data_packets_received = s.data_received;
  out->duplicates = s.duplicates;
  out->acks_sent = s.acks_sent;
  out->acks_received = s.acks_received;
  out->nacks_sent = s.nacks_sent;
  out->nacks_received = s.nacks_received;
  out->lost_inferred = s.lost_inferred;
  out->lost_nacked = s.lost_nacked;
  out->lost_timeout = s.lost_timeout;
  out->timeouts = s.timeouts;
  out->rnr_nacks_sent = s.rnr_nacks;
  out->rnr_nacks_received = s.rnr_nacks_received;
  out->access_errors = s.access_errors;
  out->bytes_placed = s.bytes_placed;
  const braid::Connection& c = *qp->conn;
  out->srtt_ns = c.srtt();
  out->min_rtt_ns = c.min_rtt();
  out->cwnd_bytes = c.cc().cwnd_bytes();
  out->inflight_bytes = c.inflight_bytes();
  out->entropies = c.paths().count();
  out->paths_bad = c.paths().bad_count();
  out->rate_mbps = static_cast<uint32_t>(c.cc().pacing_rate_bps() / 1'000'000);
  out->ecn_received = s.ecn_received;
  out->cnps_sent = s.cnps_sent;
  out->cnps_received = s.cnps_received;
  out->credit_requests_sent = s.credit_requests_sent;
  out->credit_requests_received = s.credit_requests_received;
  out->credits_sent = s.credits_sent;
  out->credits_received = s.credits_received;
  out->credit_bytes_granted = s.credit_bytes_granted;
  out->unscheduled_sent = s.unscheduled_sent;
  out->credit_stalls = s.credit_stalls;
  out->wrong_job_id = s.wrong_job_id;
  out->auth_failed = s.auth_failed;
  out->auth_replayed = s.auth_replayed;
  out->unsealed = s.unsealed;
  out->spurious_timeouts = s.spurious_timeouts;
  if (const braid::NsccCc* n = c.cc().nscc(); n != nullptr && n->configured()) {
    out->base_rtt_ns = static_cast<uint32_t>(n->base_rtt_ns());
    out->target_delay_ns = static_cast<uint32_t>(n->target_delay_ns());
    out->max_cwnd_bytes = static_cast<uint32_t>(n->max_window());
    out->decreases = static_cast<uint32_t>(n->decreases());
  }
  return 0;
}

int braid_query_path_stats(struct braid_qp* qp, unsigned int index, struct braid_path_stats* out) {
  if (qp == nullptr || out == nullptr) return EINVAL;
  EngineGuard g(qp->context, qp->engine);
  if (qp->conn == nullptr || index >= qp->conn->paths().count()) return EINVAL;
  const braid::PathSet& p = qp->conn->paths();
  const auto i = static_cast<uint8_t>(index);
  const braid::EntropyStats& s = p.stats(i);
  std::memset(out, 0, sizeof(*out));
  out->udp_src_port = p.entropy(i);
  out->state = static_cast<uint8_t>(p.health(i).state);
  out->losses_in_row = p.health(i).losses_in_row;
  out->sent = s.sent;
  out->acked = s.acked;
  out->ecn_marked = s.ecn_marked;
  out->lost = s.lost;
  out->srtt_ns = s.srtt_ns;
  out->min_rtt_ns = s.min_rtt_ns;
  out->late_ns = s.late_ns;
  return 0;
}

int braid_query_port_stats(struct braid_context* c, struct braid_port_stats* out) {
  if (c == nullptr || out == nullptr) return EINVAL;
  Guard g(c);
  std::memset(out, 0, sizeof(*out));
  // The port's frames (every queue's) and each engine's counters.
  braid::PacketIoStats io = c->port ? c->port->stats() : c->engine->io().stats();
  for (uint16_t k = 1; k < c->engines() && !c->port; ++k) {
    const braid::PacketIoStats q = c->slots[k]->engine->io().stats();
    io.rx_frames += q.rx_frames;
    io.tx_frames += q.tx_frames;
    io.rx_missed += q.rx_missed;
    io.tx_dropped += q.tx_dropped;
    io.tx_external += q.tx_external;
  }
  out->rx_frames = io.rx_frames;
  out->tx_frames = io.tx_frames;
  out->rx_missed = io.rx_missed;
  out->tx_dropped = io.tx_dropped;
  out->tx_in_place = io.tx_external;
  for (auto& s : c->slots) {
    braid::Engine& en = *s->engine;
    const braid::EngineStats& e = en.stats();
    out->rx_dropped += en.endpoint().stats().dropped();
    out->rx_bad_crc += en.endpoint().stats().drops_for(braid::wire::DropReason::kBadCrc);
    out->tx_ring_full += e.tx_ring_full;
    out->tx_stalled_ms = std::max<uint64_t>(out->tx_stalled_ms, en.tx_blocked_ns() / 1'000'000);
    out->tx_no_buffer += e.tx_no_buffer;
    out->arp_frames += e.arp_frames;
    out->poll_gaps += e.poll_gaps;
    out->longest_poll_gap_us =
        std::max<uint64_t>(out->longest_poll_gap_us, e.longest_poll_gap_ns / 1000);
    out->steered += e.steered_in;
    out->steer_dropped += e.steer_dropped;
  }
  return 0;
}

}  // extern "C"

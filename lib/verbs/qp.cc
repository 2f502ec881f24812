// Queue pairs: create, destroy, the state machine (modify, query).
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

namespace {

constexpr uint32_t kCmQpNum = 1;  // BRAID_QPT_CM's

// The remote operations a QP's access flags allow, as the core names them.
uint32_t remote_access_of(unsigned int flags) {
  return ((flags & BRAID_ACCESS_REMOTE_WRITE) ? braid::kAccessRemoteWrite : 0u) |
         ((flags & BRAID_ACCESS_REMOTE_READ) ? braid::kAccessRemoteRead : 0u) |
         ((flags & BRAID_ACCESS_REMOTE_ATOMIC) ? braid::kAccessRemoteAtomic : 0u);
}

// InfiniBand's RNR timer encoding (min_rnr_timer), in nanoseconds.
braid::TimeNs rnr_delay_ns(uint8_t code) {
  static const uint32_t kUs[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                   160,    240,   320,   480,    640,    960,    1280,   1920,
                                   2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                   40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return braid::TimeNs{kUs[code & 31]} * 1000;
}

}  // namespace

// The QP leaves its connection (destroy, or RESET): the connection goes
// with it (closed as an RC QP goes, or at once), unless it is a shared PDC
// that other QPs still use. A number the shared PDC's peer may still name
// is held by the PDC (qpn_holds) until the PDC goes; the QP's own hold is
// its caller's (destroy).
static void release_connection(braid_qp* qp, bool close) {
  braid_context* c = qp->context;
  braid::Engine& e = *c->slots[qp->engine]->engine;
  braid::Connection* conn = qp->conn;
  const uint16_t key = conn->config().local_id;
  qp->conn = nullptr;
  qp->core = nullptr;
  if (conn->shared() && conn->live_queue_pairs() > 1) {
    using Detach = braid::Endpoint::Detach;
    const Detach d = e.endpoint().detach_queue_pair(key, qp->slot);
    // (The key is held by the PDC from its creation.)
    if (d == Detach::kNumberHeld && qp->qp_num != key) {
      ++c->qpn_holds[qp->qp_num];
      c->pdc_held_qpns[key].push_back(qp->qp_num);
    }
    // (kRefused is not reached: a shared PDC with two live queue pairs
    // takes either off, and a QP leaves once.)
    return;
  }
  const bool shared = conn->shared();
  if (close) {
    e.close_connection(key);
    e.transmit();
  } else {
    e.destroy_connection(key);
  }
  if (!shared) return;
  // The PDC is gone: its holds go (its key's and the numbers it kept).
  if (auto it = c->pdc_held_qpns.find(key); it != c->pdc_held_qpns.end()) {
    for (uint32_t n : it->second) --c->qpn_holds[n];
    c->pdc_held_qpns.erase(it);
  }
  --c->qpn_holds[key];
}

// The MAC of the next hop towards peer_ip, for engine k (every engine's
// lock held). The reply may arrive on any engine's queue (a NIC's RSS sends
// ARP to one queue), so each engine asks, all are polled, and whichever
// learns it first tells k. wait_us < 0: only what is known now (resolution
// starts). With one engine this is Engine::resolve_neighbor's loop.
bool braid::resolve_for(braid_context* c, uint16_t k, uint32_t peer_ip, int wait_us,
                        braid::wire::MacAddr* mac) {
  braid::Engine& e = *c->slots[k]->engine;
  const braid::TimeNs deadline = e.now() + (wait_us < 0 ? 0 : uint64_t(wait_us) * 1000);
  for (;;) {
    for (auto& s : c->slots) {
      if (!s->engine->lookup_neighbor(peer_ip, mac)) continue;
      if (s->engine.get() != &e) e.learn_neighbor(peer_ip, *mac);
      return true;
    }
    if (e.neighbor_state(peer_ip) == braid::net::NeighborState::kFailed || e.now() >= deadline) {
      return false;
    }
    for (auto& s : c->slots) s->engine->poll();
  }
}

static braid_async_event qp_event(braid_qp* qp, braid_event_type type) {
  braid_async_event ev{};
  ev.event_type = type;
  ev.qp = qp;
  ev.context = qp->qp_context;
  return ev;
}

// The core's word that a QP went to its error state (its work requests
// flushed): the asynchronous events an InfiniBand channel adapter raises
// then (include/braid/verbs.h). An engine's thread, under its lock.
static void qp_entered_error(void* arg, braid::QpFault why) {
  auto* qp = static_cast<braid_qp*>(arg);
  if (qp->destroying) return;
  braid_context* c = qp->context;
  switch (why) {
    case braid::QpFault::kNone:
      break;
    case braid::QpFault::kAccess:
      raise_async_event(c, qp_event(qp, BRAID_EVENT_QP_ACCESS_ERR));
      break;
    case braid::QpFault::kInvalid:
      raise_async_event(c, qp_event(qp, BRAID_EVENT_QP_REQ_ERR));
      break;
    case braid::QpFault::kSendCqOverrun:
    case braid::QpFault::kRecvCqOverrun: {
      braid_cq* cq = why == braid::QpFault::kSendCqOverrun ? qp->send_cq : qp->recv_cq;
      braid_async_event ev{};
      ev.event_type = BRAID_EVENT_CQ_ERR;
      ev.cq = cq;
      ev.context = cq->cq_context;
      raise_async_event(c, ev);
      raise_async_event(c, qp_event(qp, BRAID_EVENT_QP_FATAL));
      break;
    }
  }
  if (qp->srq != nullptr) raise_async_event(c, qp_event(qp, BRAID_EVENT_QP_LAST_WQE_REACHED));
}

// COMM_EST's bookkeeping: a QP waits for its first request from RTR until
// it leaves RTR (or goes).
static void stop_waiting_for_comm_est(braid_qp* qp) {
  auto& w = qp->context->slots[qp->engine]->comm_est;
  std::erase_if(w, [qp](const braid::EngineSlot::CommEstWait& x) { return x.qp == qp; });
}

void raise_comm_est(braid_context* c, uint16_t k) {
  auto& waiting = c->slots[k]->comm_est;
  std::erase_if(waiting, [c](const braid::EngineSlot::CommEstWait& w) {
    braid_qp* qp = w.qp;
    // A connection that has carried several QPs counts each one's requests;
    // one that has carried only this QP counts them in its statistics.
    // (Checked before a second QP joins: to_rtr.)
    const braid::Connection& conn = *qp->conn;
    const bool got = conn.carried_several() ? qp->core->requests_received() > w.requests_at_rtr
                                            : conn.stats().data_received > w.data_at_rtr;
    if (got && !qp->in_error()) raise_async_event(c, qp_event(qp, BRAID_EVENT_COMM_EST));
    return got || qp->in_error();
  });
}

// SQ_DRAINED's bookkeeping: a QP waits from the move to SQD until its send
// queue has drained (or it leaves SQD, or goes).
static void stop_waiting_for_drain(braid_qp* qp) {
  std::erase(qp->context->slots[qp->engine]->sq_draining, qp);
}

void raise_sq_drained(braid_context* c, uint16_t k) {
  std::erase_if(c->slots[k]->sq_draining, [c](braid_qp* qp) {
    if (qp->in_error()) return true;  // flushed: no drain to tell of
    if (!qp->conn->send_queue_drained(qp->slot)) return false;
    if (qp->sqd_notify) raise_async_event(c, qp_event(qp, BRAID_EVENT_SQ_DRAINED));
    return true;
  });
}

// RTS -> SQD (send queue drain): requests not started yet wait, those
// started complete; SQ_DRAINED (asked for with EN_SQD_ASYNC_NOTIFY) once
// they have. Posting goes on. Other attributes are not taken here.
static int to_sqd(braid_qp* qp, const braid_qp_attr* a, int mask) {
  qp->sqd_notify = (mask & BRAID_QP_EN_SQD_ASYNC_NOTIFY) && a->en_sqd_async_notify;
  qp->conn->set_draining(qp->slot, true);
  // Only a QP that asked for the event waits in the list each poll looks
  // at (sq_draining is queried from the queue pair itself).
  if (!qp->sqd_notify) return 0;
  qp->context->slots[qp->engine]->sq_draining.push_back(qp);  // (it left the list with RTS)
  raise_sq_drained(qp->context, qp->engine);  // nothing outstanding: drained at once
  return 0;
}

// As a NIC's provider does at RESET: the QP's completions still in its CQs
// go (a program that restarts a failed QP must not poll them).
static void erase_completions(braid_qp* qp) {
  for (braid_cq* cq : {qp->send_cq, qp->recv_cq}) {
    if (cq->rings[qp->engine] != nullptr) cq->ring(qp->engine).erase_qp(qp->qp_num);
  }
}

// A UD QP's state machine: its datagram queue pair is made at INIT (with
// its Q_Key) and goes at RESET; RTR and RTS only open it for sends.
static int modify_ud(braid_qp* qp, const braid_qp_attr* a, int mask, braid_qp_state from,
                     braid_qp_state to) {
  braid_context* c = qp->context;
  braid::Endpoint& ep = c->slots[qp->engine]->engine->endpoint();
  if (to == BRAID_QPS_ERR) {
    if (qp->ud != nullptr) qp->ud->flush();
    return 0;
  }
  if (to == BRAID_QPS_RESET) {
    if (qp->ud != nullptr) ep.destroy_datagram_qp(qp->qp_num);
    qp->ud = nullptr;
    return 0;
  }
  const bool ok = (from == BRAID_QPS_RESET && to == BRAID_QPS_INIT) ||
                  (from == BRAID_QPS_INIT && to == BRAID_QPS_INIT) ||
                  (from == BRAID_QPS_INIT && to == BRAID_QPS_RTR) ||
                  (from == BRAID_QPS_RTR && to == BRAID_QPS_RTS) ||
                  (from == BRAID_QPS_RTS && to == BRAID_QPS_RTS);
  if (!ok) return fail(EINVAL, "modify_qp: transition not allowed");
  if (from == BRAID_QPS_RESET && !(mask & BRAID_QP_QKEY)) {
    return fail(EINVAL, "modify_qp: a UD QP needs its Q_Key at INIT");
  }
  if (mask & BRAID_QP_QKEY) qp->attr.qkey = a->qkey;
  if (from == BRAID_QPS_RESET) {
    braid::DatagramConfig dc;
    dc.qp_num = qp->qp_num;
    dc.qkey = qp->attr.qkey;
    const uint32_t link_mtu = c->engine->io().max_frame() - braid::wire_l2();
    // What a datagram may carry: the port's MTU less its headers, as an
    // IB MTU (the largest of 256..4096 that fits), as a UD QP's path MTU.
    const uint32_t room = link_mtu - braid::wire::kIpv4Size - braid::wire::kUdpSize -
                          braid::wire::kUudSize - braid::wire::kSesStandardSize -
                          c->trailer_bytes();
    dc.mtu = 256;
    while (dc.mtu * 2 <= std::min<uint32_t>(room, 4096)) dc.mtu *= 2;
    dc.sq_depth = qp->init.cap.max_send_wr;
    dc.rq_depth = qp->init.cap.max_recv_wr;
    dc.entropies = c->config.entropies;
    qp->ud =
        ep.create_datagram_qp(dc, &qp->send_cq->ring(qp->engine), &qp->recv_cq->ring(qp->engine));
    if (qp->ud == nullptr) return fail(EBUSY, "modify_qp INIT: QP number in use in the core");
    qp->attr.path_mtu = static_cast<braid_mtu>(std::countr_zero(dc.mtu) - 7);
  } else if (mask & BRAID_QP_QKEY) {
    qp->ud->set_qkey(qp->attr.qkey);
  }
  if (to == BRAID_QPS_RTS && (mask & BRAID_QP_SQ_PSN)) qp->attr.sq_psn = a->sq_psn;
  if (to == BRAID_QPS_RTR) qp->ud->set_receiving(true);
  return 0;
}

extern "C" {

struct braid_ah* braid_create_ah(struct braid_pd* pd, struct braid_ah_attr* attr) {
  if (pd == nullptr || attr == nullptr) return fail_null<braid_ah>(EINVAL, "create_ah: no PD");
  uint32_t ip = 0;
  if (braid_gid_to_ipv4(&attr->dgid, &ip) != 0) {
    return fail_null<braid_ah>(EINVAL, "create_ah: the GID is not an IPv4-mapped address");
  }
  braid_context* c = pd->context;
  Guard g(c);
  auto* ah = new braid_ah{c, pd, *attr, ip, {}, false};
  if (ip == c->ip) {
    ah->mac = c->engine->endpoint().config().mac;  // our own address: delivered here
    ah->resolved = true;
  } else {
    const int wait_us = c->config.rtr_arp_wait_us == 0 ? 2000 : c->config.rtr_arp_wait_us;
    ah->resolved = braid::resolve_for(c, 0, ip, wait_us, &ah->mac);
  }
  ++pd->users;
  ++c->open_objects;
  return ah;
}

int braid_destroy_ah(struct braid_ah* ah) {
  if (ah == nullptr) return EINVAL;
  braid_context* c = ah->context;
  Guard g(c);
  --ah->pd->users;
  --c->open_objects;
  delete ah;
  return 0;
}

uint32_t braid_qp_num(const struct braid_qp* qp) {
  return qp == nullptr ? 0 : qp->qp_num;
}

struct braid_qp* braid_create_qp(struct braid_pd* pd, struct braid_qp_init_attr* a) {
  if (pd == nullptr || a == nullptr || a->send_cq == nullptr || a->recv_cq == nullptr) {
    return fail_null<braid_qp>(EINVAL, "create_qp: PD and both CQs are required");
  }
  if (a->qp_type != BRAID_QPT_RC && a->qp_type != BRAID_QPT_UD && a->qp_type != BRAID_QPT_CM) {
    return fail_null<braid_qp>(EOPNOTSUPP, "create_qp: RC and UD queue pairs only");
  }
  const bool cm = a->qp_type == BRAID_QPT_CM;
  if ((a->qp_type == BRAID_QPT_UD || cm) &&
      (a->srq != nullptr || pd->context->config.auth != BRAID_AUTH_OFF)) {
    return fail_null<braid_qp>(EOPNOTSUPP,
                               "create_qp: a UD QP takes no SRQ, and needs authenticated mode off");
  }
  if (a->cap.max_send_sge > braid::kMaxSge || a->cap.max_recv_sge > braid::kMaxSge ||
      a->cap.max_send_wr > 32768 || a->cap.max_recv_wr > (1u << 20) ||
      a->cap.max_inline_data > 1024) {
    return fail_null<braid_qp>(EINVAL, "create_qp: capabilities beyond the device's limits");
  }
  braid_context* c = pd->context;
  if (a->srq != nullptr && a->srq->context != c) {
    return fail_null<braid_qp>(EINVAL, "create_qp: the SRQ is another device's");
  }
  Guard g(c);
  // Numbers go round the 16-bit space rather than lowest-free first: a
  // number comes back only after 65534 others, so late packets of an old
  // QP find no connection (or a long-settled one) under it.
  // QP 1 is the CM's (BRAID_QPT_CM), held for it whether it exists or not.
  uint32_t qpn = 0, counter = 0;
  if (cm) {
    if (c->qpn_holds[kCmQpNum] != 0) return fail_null<braid_qp>(EBUSY, "create_qp: QP 1 exists");
    qpn = kCmQpNum;
  } else {
    for (uint32_t i = 0; i < 65535; ++i) {
      counter = (c->next_qpn - 1 + i) % 65535 + 1;  // 1..65535
      const uint32_t n = braid::qpn_of(counter, c->qpn_key);
      if (n != kCmQpNum && c->qpn_holds[n] == 0) {
        qpn = n;
        break;
      }
    }
    if (qpn == 0) return fail_null<braid_qp>(ENOMEM, "create_qp: no free QP number");
    c->next_qpn = counter % 65535 + 1;
  }
  c->qpn_holds[qpn] = 1;  // the QP's own
  auto* qp = new braid_qp{};
  qp->context = c;
  qp->pd = pd;
  qp->srq = a->srq;
  if (a->srq != nullptr) ++a->srq->users;
  qp->send_cq = a->send_cq;
  qp->recv_cq = a->recv_cq;
  qp->qp_context = a->qp_context;
  qp->qp_num = qpn;
  qp->engine = c->engine_of(qpn);
  qp->init = *a;
  if (cm) qp->init.qp_type = BRAID_QPT_UD;  // a UD QP in every other respect
  qp->init.cap.max_send_wr = std::max<uint32_t>(a->cap.max_send_wr, 1);
  qp->init.cap.max_recv_wr = std::max<uint32_t>(a->cap.max_recv_wr, 1);
  qp->sq_sig_all = a->sq_sig_all != 0;
  qp->inline_slots = std::bit_ceil(qp->init.cap.max_send_wr);
  qp->inline_buf.resize(size_t{qp->inline_slots} * a->cap.max_inline_data);
  if (cm) {
    std::lock_guard<std::mutex> e(c->event_lock);
    for (braid_cq* cq : {a->send_cq, a->recv_cq}) {
      if (cq->armed && !cq->internal) {  // (armed before: move it to its counter)
        c->armed.fetch_sub(1, std::memory_order_relaxed);
        c->armed_internal.fetch_add(1, std::memory_order_relaxed);
      }
      cq->internal = true;
    }
  }
  for (braid_cq* cq : {a->send_cq, a->recv_cq}) {
    ++cq->users;
    if (cq->rings[qp->engine] == nullptr) {
      cq->rings[qp->engine] = std::make_unique<braid::CompletionQueue>(cq->cqe);
      cq->has_ring[qp->engine].store(true, std::memory_order_release);
    }
  }
  ++pd->users;
  ++c->open_objects;
  c->qps.push_back(qp);
  return qp;
}

int braid_destroy_qp(struct braid_qp* qp) {
  if (qp == nullptr) return EINVAL;
  braid_context* c = qp->context;
  Guard g(c);
  qp->destroying = true;
  if (qp->state == BRAID_QPS_RTR) stop_waiting_for_comm_est(qp);
  if (qp->state == BRAID_QPS_SQD) stop_waiting_for_drain(qp);
  if (qp->ud != nullptr) {
    c->slots[qp->engine]->engine->endpoint().destroy_datagram_qp(qp->qp_num);
    qp->ud = nullptr;
  }
  if (qp->conn != nullptr) {
    // The peer's last sends completed here; it learns so from our ACK. An
    // ACK not yet sent (coalesced, held), lost, or left in a ring the peer
    // has not read when our port closes would end them in RETRY_EXC_ERR
    // there: the connection's CLOSE says it again until the peer answers
    // (Endpoint::close_connection; close_device waits for the answers).
    // A QP on a shared PDC with others leaves it alone.
    release_connection(qp, true);
  }
  --c->qpn_holds[qp->qp_num];
  forget_async_events(c, qp, nullptr, nullptr);
  c->qps.erase(std::remove(c->qps.begin(), c->qps.end(), qp), c->qps.end());
  // A CQ keeps its rings (and the completions in them) until it goes.
  --qp->send_cq->users;
  --qp->recv_cq->users;
  if (qp->srq != nullptr) --qp->srq->users;
  --qp->pd->users;
  --c->open_objects;
  delete qp;
  return 0;
}

static int to_rtr(braid_qp* qp, const braid_qp_attr* a, int mask) {
  constexpr int kNeed = BRAID_QP_AV | BRAID_QP_PATH_MTU | BRAID_QP_DEST_QPN | BRAID_QP_RQ_PSN;
  if ((mask & kNeed) != kNeed) {
    return fail(EINVAL, "modify_qp RTR needs AV, PATH_MTU, DEST_QPN and RQ_PSN");
  }
  uint32_t peer_ip = 0;
  if (braid_gid_to_ipv4(&a->ah_attr.dgid, &peer_ip) != 0) {
    return fail(EINVAL, "modify_qp RTR: the destination GID is not an IPv4-mapped address");
  }
  if (a->dest_qp_num == 0 || a->dest_qp_num > 65535) {
    return fail(EINVAL, "modify_qp RTR: destination QP number out of range");
  }
  if ((mask & BRAID_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > braid::kMaxRdAtomic) {
    return fail(EINVAL, "modify_qp RTR: max_dest_rd_atomic above the device's max_qp_rd_atom");
  }
  braid_context* c = qp->context;
  braid::Engine& e = *c->slots[qp->engine]->engine;
  // The MAC comes from ARP. A short wait covers a peer that answers at once;
  // otherwise the QP goes to RTR now and sends once the reply arrives (the
  // peer may be busy in its own connection set-up).
  braid::wire::MacAddr mac{};
  const int arp_wait_us = c->config.rtr_arp_wait_us == 0 ? 2000 : c->config.rtr_arp_wait_us;
  const bool known = braid::resolve_for(c, qp->engine, peer_ip, arp_wait_us, &mac);
  // What the polls made so far counts for the QPs waiting for COMM_EST
  // before this one may join one's connection (and change how it counts).
  if (!c->slots[qp->engine]->comm_est.empty()) raise_comm_est(c, qp->engine);
  braid::ConnectionConfig cc;
  cc.await_remote_mac = !known;
  cc.local_id = static_cast<uint16_t>(qp->qp_num);
  cc.remote_id = static_cast<uint16_t>(a->dest_qp_num);
  cc.qp_num = qp->qp_num;
  cc.remote_qpn = a->dest_qp_num;
  cc.remote_mac = mac;
  cc.remote_ip = peer_ip;
  cc.rx_psn = a->rq_psn;
  // Until RTS gives the send PSN: READ responses sent in RTR start at the
  // requester's own initial PSN (our rq_psn), which it recognises
  // (Connection::learn_responder_psn).
  cc.tx_psn = cc.rx_psn;
  cc.pd = qp->pd->id;
  const uint32_t link_mtu = e.io().max_frame() - braid::wire_l2();
  // A path MTU below the port's is honoured to the byte. At the port's own
  // (the largest an InfiniBand MTU can name), packets fill the link: 1416
  // payload bytes at MTU 1500 rather than 1024, 8916 at 9000 rather than
  // 4096. Like RoCE, both ends need the link MTU the QP was set up with.
  const uint32_t ib_mtu = 128u << std::clamp<int>(a->path_mtu, 1, 5);
  const uint32_t link_payload = braid::max_payload(link_mtu, c->trailer_bytes());
  cc.mtu = a->path_mtu >= ib_mtu_for(link_payload) ? link_payload : std::min(ib_mtu, link_payload);
  cc.sq_depth = qp->init.cap.max_send_wr;
  cc.rq_depth = qp->init.cap.max_recv_wr;
  cc.on_error = qp_entered_error;
  cc.on_error_arg = qp;
  if (qp->srq != nullptr) {
    // It holds bound as many receives as its peer may have messages under
    // way (its PSN window bounds them: QueuePair::bind_shared).
    cc.srq = &qp->srq->queue;
    cc.rq_depth = 1u << 20;
  }
  cc.entropy.count = c->config.entropies;
  cc.entropy.policy = static_cast<braid::PathPolicy>(c->config.paths - 1);  // checked at open
  cc.cc.algorithm = static_cast<braid::CcAlgorithm>(c->config.cc - 1);      // checked at open
  // NSCC's base RTT is the smallest measured; nothing here trims.
  cc.cc.link_bps = uint64_t{c->config.link_mbps} * 1'000'000;
  cc.cc.base_rtt_ns = uint64_t{c->config.base_rtt_us} * 1000;
  cc.cc.trimming = false;
  cc.cc.credit = c->config.credit == 1;
  cc.max_rd_atomic = braid::kDefaultRdAtomic;  // until RTS says
  // Unset, 16: InfiniBand requires it at RTR.
  qp->attr.max_dest_rd_atomic =
      (mask & BRAID_QP_MAX_DEST_RD_ATOMIC) ? a->max_dest_rd_atomic : braid::kDefaultRdAtomic;
  cc.max_dest_rd_atomic = qp->attr.max_dest_rd_atomic;
  cc.remote_access = remote_access_of((mask & BRAID_QP_ACCESS_FLAGS) ? a->qp_access_flags
                                                                     : qp->attr.qp_access_flags);
  if (mask & BRAID_QP_MIN_RNR_TIMER) qp->attr.min_rnr_timer = a->min_rnr_timer;
  cc.rnr_delay_ns = rnr_delay_ns(qp->attr.min_rnr_timer);
  cc.peer_ack_hold_ns = braid::kAckHoldNs;
  if (mask & BRAID_QP_AUTH_NONCE) std::memcpy(cc.auth_nonce.data(), a->auth_nonce, 16);
  cc.shared = c->config.pdc_per_peer == 1;
  // A PDC per peer carries what a PDC per QP would for each of its QPs:
  // its PSN window is the largest (its rings grow only as far as used).
  if (cc.shared) cc.window_packets = 16384;
  // A PDC per peer: the QP joins the one its engine has to this peer (same
  // path MTU), unless that one failed. With several engines, a QP's engine
  // is its number's class (number % engines) at each end, and a PDC lives
  // on one engine at each: the QPs it carries share their own class and
  // their peers' (both ends run as many engines), so both ends group the
  // same pairs.
  braid::Connection* shared = nullptr;
  if (cc.shared) {
    const uint32_t classes = static_cast<uint32_t>(c->slots.size());
    for (braid_qp* o : c->qps) {
      braid::Connection* oc = o->conn;
      if (o != qp && oc != nullptr && oc->shared() && o->engine == qp->engine &&
          o->attr.dest_qp_num % classes == a->dest_qp_num % classes &&
          oc->config().remote_ip == peer_ip && oc->config().mtu == cc.mtu &&
          oc->state() == braid::ConnectionState::kActive && !oc->peer_closed()) {
        shared = oc;
        break;
      }
    }
  }
  if (shared != nullptr) {
    braid::QpConfig q = shared->queue_pair_config(qp->qp_num, a->dest_qp_num);
    q.pd = cc.pd;
    q.sq_depth = cc.sq_depth;
    q.rq_depth = cc.rq_depth;
    q.srq = cc.srq;
    q.on_error = cc.on_error;
    q.on_error_arg = cc.on_error_arg;
    q.max_rd_atomic = cc.max_rd_atomic;
    q.max_dest_rd_atomic = cc.max_dest_rd_atomic;
    q.remote_access = cc.remote_access;
    q.rx_psn = cc.rx_psn;
    const uint16_t slot =
        e.endpoint().attach_queue_pair(shared->config().local_id, q, &qp->send_cq->ring(qp->engine),
                                       &qp->recv_cq->ring(qp->engine));
    if (slot == braid::Connection::kNoSlot) {
      return fail(EBUSY, "modify_qp RTR: the QP could not join its peer's PDC");
    }
    qp->conn = shared;
    qp->slot = slot;
  } else {
    qp->conn = e.endpoint().create_connection(cc, &qp->send_cq->ring(qp->engine),
                                              &qp->recv_cq->ring(qp->engine));
    qp->slot = 0;
    // A shared PDC holds the number it is kept under until it goes.
    if (qp->conn != nullptr && cc.shared) ++c->qpn_holds[qp->qp_num];
  }
  if (qp->conn == nullptr) return fail(EBUSY, "modify_qp RTR: QP number in use in the core");
  qp->core = &qp->conn->queue_pair(qp->slot);
  // The device has a peer now: from here to close its bursts must not race
  // the peer's going (a memif peer that exits makes DPDK unmap the rings a
  // burst reads). Before the first RTR the link may still come and go (a
  // client that retries its connection).
  for (auto& s : c->slots) s->engine->io().hold_events_until_close();
  if (!known && shared == nullptr)
    e.route_when_resolved(static_cast<uint16_t>(qp->qp_num), peer_ip);
  for (auto& [id, sgl] : qp->early_recvs) qp->conn->post_recv(qp->slot, id, sgl);
  qp->early_recvs.clear();
  qp->attr.dest_qp_num = a->dest_qp_num;
  qp->attr.rq_psn = a->rq_psn;
  qp->attr.path_mtu = a->path_mtu;
  qp->attr.ah_attr = a->ah_attr;
  if (mask & BRAID_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a->qp_access_flags;
  return 0;
}

// What RTS->RTS may change, as InfiniBand's state table allows for RC (the
// kernel refuses the rest): access flags and the RNR timer. Also applied
// at RTR->RTS.
static void apply_access_and_rnr(braid_qp* qp, const braid_qp_attr* a, int mask) {
  if (mask & BRAID_QP_ACCESS_FLAGS) {
    qp->attr.qp_access_flags = a->qp_access_flags;
    qp->conn->set_remote_access(qp->slot, remote_access_of(a->qp_access_flags));
  }
  if (mask & BRAID_QP_MIN_RNR_TIMER) {
    qp->attr.min_rnr_timer = a->min_rnr_timer;
    qp->conn->set_min_rnr_delay(rnr_delay_ns(a->min_rnr_timer));
  }
}

static int rts_to_rts(braid_qp* qp, const braid_qp_attr* a, int mask) {
  constexpr int kAllowed =
      BRAID_QP_STATE | BRAID_QP_CUR_STATE | BRAID_QP_ACCESS_FLAGS | BRAID_QP_MIN_RNR_TIMER;
  if (mask & ~kAllowed) {
    return fail(EINVAL,
                "modify_qp RTS->RTS: only the access flags and the RNR timer may change "
                "(timeout, retry counts, PSNs and READ limits are set at RTR and RTS)");
  }
  apply_access_and_rnr(qp, a, mask);  // (a QP in RTS has its connection)
  return 0;
}

static int to_rts(braid_qp* qp, const braid_qp_attr* a, int mask) {
  if (!(mask & BRAID_QP_SQ_PSN)) return fail(EINVAL, "modify_qp RTS needs SQ_PSN");
  if ((mask & BRAID_QP_TIMEOUT) && a->timeout > 31) {
    return fail(EINVAL, "modify_qp: timeout must be 0..31");
  }
  if ((mask & BRAID_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > braid::kMaxRdAtomic) {
    return fail(EINVAL, "modify_qp RTS: max_rd_atomic above the device's max_qp_init_rd_atom");
  }
  if (qp->conn->shared()) {
    qp->conn->speak_as(qp->slot, a->sq_psn);  // the first QP's PSNs are the PDC's
  } else if (!qp->conn->set_send_psn(a->sq_psn)) {
    if (qp->conn->auth_broken()) {
      return fail(EIO, "modify_qp RTS: the QP's keys could not be made (libcrypto failed)");
    }
    return fail(EINVAL, "modify_qp RTS: the send queue has already started");
  }
  // Unset (InfiniBand requires them for RC), the defaults of an RC QP as
  // perftest leaves it.
  qp->attr.retry_cnt = (mask & BRAID_QP_RETRY_CNT) ? std::min<uint8_t>(a->retry_cnt, 7) : 7;
  qp->attr.rnr_retry = (mask & BRAID_QP_RNR_RETRY) ? std::min<uint8_t>(a->rnr_retry, 7) : 7;
  qp->attr.timeout = (mask & BRAID_QP_TIMEOUT) ? a->timeout : 14;
  qp->attr.max_rd_atomic =
      (mask & BRAID_QP_MAX_QP_RD_ATOMIC) ? a->max_rd_atomic : braid::kDefaultRdAtomic;
  qp->attr.sq_psn = a->sq_psn;
  // IB's local ACK timeout (4.096 us x 2^timeout) caps Braid's adaptive
  // RTO; 0 is infinite: the QP waits for its peer forever (RTO backoff
  // capped at 50 ms, so that a peer that comes back is heard from soon).
  const uint8_t timeout = qp->attr.timeout;
  const braid::TimeNs rto_max =
      timeout == 0 ? 50'000'000ull : std::min<braid::TimeNs>(4096ull << timeout, 60'000'000'000ull);
  qp->conn->set_retry(qp->attr.retry_cnt, qp->attr.rnr_retry, rto_max, timeout == 0);
  qp->conn->set_max_rd_atomic(qp->slot, qp->attr.max_rd_atomic);
  apply_access_and_rnr(qp, a, mask);
  return 0;
}

int braid_modify_qp(struct braid_qp* qp, struct braid_qp_attr* a, int mask) {
  if (qp == nullptr || a == nullptr) return EINVAL;
  braid_context* c = qp->context;
  Guard g(c);
  if (!(mask & BRAID_QP_STATE)) return fail(EINVAL, "modify_qp: QP_STATE missing");
  const braid_qp_state from = qp->state, to = a->qp_state;
  int rc = 0;
  // A QP with no connection to flush (before RTR; UD) that goes to ERR:
  // its SRQ's receives are no longer its to take.
  if (to == BRAID_QPS_ERR && from != BRAID_QPS_ERR && qp->srq != nullptr && qp->conn == nullptr) {
    raise_async_event(qp->context, qp_event(qp, BRAID_EVENT_QP_LAST_WQE_REACHED));
  }
  if (qp->is_ud()) {
    rc = modify_ud(qp, a, mask, from, to);
    if (rc != 0) return rc;
    if (to == BRAID_QPS_RESET) erase_completions(qp);
    qp->state = to;
    qp->attr.qp_state = to;
    return 0;
  }
  if (to == BRAID_QPS_ERR) {
    if (qp->conn != nullptr) qp->conn->set_queue_pair_error(qp->slot, braid::WcStatus::kWrFlushErr);
    // Receives posted before RTR have no connection to flush them.
    for (auto& r : qp->early_recvs) {
      flush_posted(qp->recv_cq, qp, r.first, braid::WcOpcode::kRecv);
    }
    qp->early_recvs.clear();
  } else if (to == BRAID_QPS_RESET) {
    if (qp->conn != nullptr) release_connection(qp, false);
    qp->early_recvs.clear();
  } else if (from == BRAID_QPS_RESET && to == BRAID_QPS_INIT) {
    if (mask & BRAID_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a->qp_access_flags;
  } else if (from == BRAID_QPS_INIT && to == BRAID_QPS_INIT) {
    if (mask & BRAID_QP_ACCESS_FLAGS) qp->attr.qp_access_flags = a->qp_access_flags;
  } else if (from == BRAID_QPS_INIT && to == BRAID_QPS_RTR) {
    rc = to_rtr(qp, a, mask);
  } else if (from == BRAID_QPS_RTR && to == BRAID_QPS_RTS) {
    rc = to_rts(qp, a, mask);
  } else if (from == BRAID_QPS_RTS && to == BRAID_QPS_RTS) {
    rc = rts_to_rts(qp, a, mask);
  } else if (from == BRAID_QPS_RTS && to == BRAID_QPS_SQD) {
    rc = to_sqd(qp, a, mask);
  } else if (from == BRAID_QPS_SQD && (to == BRAID_QPS_SQD || to == BRAID_QPS_RTS)) {
    // As rxe: attributes, or back to RTS, once drained (what had started
    // has completed).
    if (!qp->in_error() && !qp->conn->send_queue_drained(qp->slot)) {
      return fail(EINVAL, "modify_qp: the send queue is still draining (SQD)");
    }
    // Drained since the last poll looked (a completion a post's transmit
    // made): its event first.
    raise_sq_drained(c, qp->engine);
    rc = rts_to_rts(qp, a, mask);
    if (rc == 0 && to == BRAID_QPS_RTS)
      qp->conn->set_draining(qp->slot, false);  // what waited goes
  } else {
    return fail(EINVAL, "modify_qp: transition not allowed");
  }
  if (rc != 0) return rc;
  if (to == BRAID_QPS_RESET) erase_completions(qp);
  if (from == BRAID_QPS_SQD && to != BRAID_QPS_SQD) {
    stop_waiting_for_drain(qp);
    qp->sqd_notify = false;
    if (to != BRAID_QPS_RTS && qp->core != nullptr) qp->core->set_draining(false);
  }
  if (from == BRAID_QPS_RTR && to != BRAID_QPS_RTR) {
    // A request that came in RTR, in a poll that did not look, still counts.
    if (to == BRAID_QPS_RTS) raise_comm_est(c, qp->engine);
    stop_waiting_for_comm_est(qp);
  }
  if (from == BRAID_QPS_INIT && to == BRAID_QPS_RTR && qp->conn != nullptr) {
    c->slots[qp->engine]->comm_est.push_back(
        {qp, qp->conn->stats().data_received, qp->core->requests_received()});
  }
  qp->state = to;
  qp->attr.qp_state = to;
  return 0;
}

int braid_query_qp(struct braid_qp* qp, struct braid_qp_attr* a, int mask,
                   struct braid_qp_init_attr* init) {
  (void)mask;
  if (qp == nullptr || a == nullptr) return EINVAL;
  EngineGuard g(qp->context, qp->engine);
  *a = qp->attr;
  a->qp_state = a->cur_qp_state = qp->in_error() ? BRAID_QPS_ERR : qp->state;
  a->en_sqd_async_notify = qp->sqd_notify;
  a->sq_draining = a->qp_state == BRAID_QPS_SQD && !qp->conn->send_queue_drained(qp->slot);
  a->cap = qp->init.cap;
  if (init != nullptr) *init = qp->init;
  return 0;
}

}  // extern "C"

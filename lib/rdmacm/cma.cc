// librdmacm's API (rdma-core 44, <rdma/rdma_cma.h>) for Braid's devices:
// event channels, ids, address and route resolution, listen / connect /
// accept / reject / disconnect with private data, QPs made for ids, and
// the synchronous (NULL channel) mode of rdma_create_ep and friends.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "rdmacm/rdmacm_internal.h"
#include "rdmacm/service.h"

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

using namespace braid::rdmacm;
namespace cmw = braid::cm;

namespace {

int fail(int err) {
  errno = err;
  return -1;
}

Id* id_of(rdma_cm_id* id) {
  return reinterpret_cast<Id*>(id);
}

bool ipv4(const sockaddr* sa, uint32_t* ip, uint16_t* port) {
  if (sa == nullptr) return false;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    *ip = ntohl(in->sin_addr.s_addr);
    *port = ntohs(in->sin_port);
    return true;
  }
  if (sa->sa_family == AF_INET6) {  // :: and IPv4-mapped ones
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    const uint8_t* b = in6->sin6_addr.s6_addr;
    static const uint8_t zero[16] = {};
    *port = ntohs(in6->sin6_port);
    if (std::memcmp(b, zero, 16) == 0) {
      *ip = 0;
      return true;
    }
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(b, mapped, 12) == 0) {
      *ip = (uint32_t{b[12]} << 24) | (uint32_t{b[13]} << 16) | (uint32_t{b[14]} << 8) | b[15];
      return true;
    }
  }
  return false;
}

uint32_t port_key(const Id* id, uint16_t port) {
  return (static_cast<uint32_t>(id->pub.ps & 0xffff) << 16) | port;
}

// Takes a port for the id: the one asked for, or a free ephemeral one.
int hold_port(Id* id, uint16_t port) {
  Cm& c = cm();
  if (port == 0) {
    for (int i = 0; i < 28000; ++i) {
      const uint16_t p = c.next_port;
      c.next_port = static_cast<uint16_t>(p >= 60999 ? 32768 : p + 1);
      if (c.ports.count(port_key(id, p)) == 0) {
        port = p;
        break;
      }
    }
    if (port == 0) return EADDRNOTAVAIL;
  } else if (c.ports.count(port_key(id, port)) != 0) {
    return EADDRINUSE;
  }
  c.ports[port_key(id, port)] = id;
  id->local_port = port;
  id->holds_port = true;
  return 0;
}

void release_port(Id* id) {
  if (!id->holds_port) return;
  auto it = cm().ports.find(port_key(id, id->local_port));
  if (it != cm().ports.end() && it->second == id) cm().ports.erase(it);
  id->holds_port = false;
}

void attach(Id* id, Device* d) {
  id->dev = d;
  id->pub.verbs = d->ctx;
  id->pub.port_num = 1;
  if (id->pub.pd == nullptr) id->pub.pd = d->pd;
  id->local_ip = d->ip;
}

Channel* new_channel(bool sync) {
  const int fd = eventfd(0, EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  auto* ch = new Channel{};
  ch->pub.fd = fd;
  ch->sync = sync;
  return ch;
}

// A channel destroyed while a thread is blocked on it stays allocated for
// that thread, which sleeps on (as one blocked reading a closed rdma_cm fd
// does, until the program exits): rping destroys its channel under its CM
// thread's feet.
void free_channel(Channel* ch) {
  for (Event* e : ch->queue) delete e;
  ch->queue.clear();
  if (ch->pub.fd >= 0) close(ch->pub.fd);
  ch->pub.fd = -1;
  if (ch->waiters > 0) {
    ch->dead = true;
    return;
  }
  delete ch;
}

// Takes the next event off the channel: blocks unless its fd is
// non-blocking (then EAGAIN), in poll() on the fd, so that a signal ends
// the wait with EINTR as a read() of rdma_cm's fd does. Called with the
// lock held.
Event* next_event(Channel* ch, std::unique_lock<std::mutex>& lock, int* err) {
  for (;;) {
    if (!ch->queue.empty()) {
      Event* e = ch->queue.front();
      ch->queue.pop_front();
      unsignal(ch);
      if (e->counted != nullptr) ++e->counted->events_out;
      return e;
    }
    if (ch->dead) {  // destroyed under us: nothing will come
      ++ch->waiters;
      for (;;) ch->cv.wait(lock);
    }
    const int fd = ch->pub.fd;
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) {
      *err = EAGAIN;
      return nullptr;
    }
    ++ch->waiters;  // the channel outlives its destruction while we wait
    lock.unlock();
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, -1);
    const int e = errno;
    lock.lock();
    --ch->waiters;
    if (r < 0 && e == EINTR) {
      *err = EINTR;
      return nullptr;
    }
  }
}

void ack(Event* e) {
  if (e->counted != nullptr) {
    --e->counted->events_out;
    e->counted->acked.notify_all();
  }
  delete e;
}

// A sync id's call: waits for the event that completes it, keeps it in
// id->event (acknowledged at the next call or at destroy). 0, or -1 with
// errno from the event: REJECTED gives ECONNREFUSED, a status its errno.
int complete(Id* id, std::unique_lock<std::mutex>& lock) {
  if (!id->own_channel) return 0;
  if (id->pub.event != nullptr) {
    ack(reinterpret_cast<Event*>(id->pub.event));
    id->pub.event = nullptr;
  }
  int err = 0;
  Event* e = next_event(id->chan, lock, &err);
  if (e == nullptr) return fail(err);
  id->pub.event = &e->pub;
  if (e->pub.event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
  if (e->pub.status < 0) return fail(-e->pub.status);
  if (e->pub.status > 0) return fail(e->pub.status);
  return 0;
}

uint8_t resources(uint8_t asked, uint8_t max) {
  return asked == RDMA_MAX_RESP_RES ? max : asked;
}

int modify_init(Id* id, ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  int mask = 0;
  if (qp_attr_for(id, &a, &mask) != 0) return EINVAL;
  if (ibv_modify_qp(qp, &a, mask) != 0) return errno ? errno : EINVAL;
  if (qp->qp_type != IBV_QPT_UD) return 0;
  for (ibv_qp_state s : {IBV_QPS_RTR, IBV_QPS_RTS}) {
    a = ibv_qp_attr{};
    a.qp_state = s;
    if (qp_attr_for(id, &a, &mask) != 0 || ibv_modify_qp(qp, &a, mask) != 0) return EINVAL;
  }
  return 0;
}

// The CQs rdma_create_qp makes when neither the attributes nor the id have
// them: one with its own completion channel per direction.
bool make_cqs(Id* id, ibv_cq** send_cq, ibv_cq** recv_cq, uint32_t send_wr, uint32_t recv_wr) {
  rdma_cm_id& p = id->pub;
  if (*recv_cq == nullptr && p.recv_cq == nullptr && recv_wr > 0) {
    p.recv_cq_channel = ibv_create_comp_channel(p.verbs);
    p.recv_cq = p.recv_cq_channel
                    ? ibv_create_cq(p.verbs, static_cast<int>(recv_wr), &p, p.recv_cq_channel, 0)
                    : nullptr;
    if (p.recv_cq == nullptr) {
      if (p.recv_cq_channel) ibv_destroy_comp_channel(p.recv_cq_channel);
      p.recv_cq_channel = nullptr;
      return false;
    }
    id->own_recv_cq = true;
  }
  if (*send_cq == nullptr && p.send_cq == nullptr && send_wr > 0) {
    p.send_cq_channel = ibv_create_comp_channel(p.verbs);
    p.send_cq = p.send_cq_channel
                    ? ibv_create_cq(p.verbs, static_cast<int>(send_wr), &p, p.send_cq_channel, 0)
                    : nullptr;
    if (p.send_cq == nullptr) {
      if (p.send_cq_channel) ibv_destroy_comp_channel(p.send_cq_channel);
      p.send_cq_channel = nullptr;
      return false;
    }
    id->own_send_cq = true;
  }
  if (*recv_cq == nullptr) *recv_cq = p.recv_cq ? p.recv_cq : p.send_cq;
  if (*send_cq == nullptr) *send_cq = p.send_cq ? p.send_cq : p.recv_cq;
  return *send_cq != nullptr && *recv_cq != nullptr;
}

void destroy_own_cqs(Id* id) {
  rdma_cm_id& p = id->pub;
  if (id->own_send_cq) {
    ibv_destroy_cq(p.send_cq);
    ibv_destroy_comp_channel(p.send_cq_channel);
    p.send_cq = nullptr;
    p.send_cq_channel = nullptr;
    id->own_send_cq = false;
  }
  if (id->own_recv_cq) {
    ibv_destroy_cq(p.recv_cq);
    ibv_destroy_comp_channel(p.recv_cq_channel);
    p.recv_cq = nullptr;
    p.recv_cq_channel = nullptr;
    id->own_recv_cq = false;
  }
}

int create_qp_common(Id* id, ibv_qp_init_attr_ex* ax) {
  rdma_cm_id& p = id->pub;
  if (p.qp != nullptr || p.verbs == nullptr) return fail(EINVAL);
  if (ax->pd == nullptr) ax->pd = p.pd;
  if (ax->pd == nullptr || ax->pd->context != p.verbs) return fail(EINVAL);
  if (!make_cqs(id, &ax->send_cq, &ax->recv_cq, ax->cap.max_send_wr, ax->cap.max_recv_wr)) {
    destroy_own_cqs(id);
    return fail(ENOMEM);
  }
  if (ax->srq == nullptr) ax->srq = p.srq;
  ax->comp_mask |= IBV_QP_INIT_ATTR_PD;
  ibv_qp* qp = ibv_create_qp_ex(p.verbs, ax);
  if (qp == nullptr) {
    const int err = errno;
    destroy_own_cqs(id);
    return fail(err ? err : EINVAL);
  }
  const int err = modify_init(id, qp);
  if (err != 0) {
    ibv_destroy_qp(qp);
    destroy_own_cqs(id);
    return fail(err);
  }
  p.qp = qp;
  p.pd = qp->pd;
  return 0;
}

}  // namespace

// ---- Event channels and events ----

BRAID_EXPORT rdma_event_channel* rdma_create_event_channel(void) {
  if (open_devices() != 0) {
    errno = ENODEV;
    return nullptr;
  }
  Channel* ch = new_channel(false);
  if (ch == nullptr) return nullptr;
  return &ch->pub;
}

BRAID_EXPORT void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel == nullptr) return;
  auto* ch = reinterpret_cast<Channel*>(channel);
  std::lock_guard<std::mutex> g(cm().mu);
  free_channel(ch);
}

BRAID_EXPORT int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return fail(EINVAL);
  auto* ch = reinterpret_cast<Channel*>(channel);
  std::unique_lock<std::mutex> lock(cm().mu);
  int err = 0;
  Event* e = next_event(ch, lock, &err);
  if (e == nullptr) return fail(err);
  *event = &e->pub;
  return 0;
}

BRAID_EXPORT int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> g(cm().mu);
  ack(reinterpret_cast<Event*>(event));
  return 0;
}

BRAID_EXPORT const char* rdma_event_str(rdma_cm_event_type event) {
  static const char* const names[] = {
      "RDMA_CM_EVENT_ADDR_RESOLVED",   "RDMA_CM_EVENT_ADDR_ERROR",
      "RDMA_CM_EVENT_ROUTE_RESOLVED",  "RDMA_CM_EVENT_ROUTE_ERROR",
      "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
      "RDMA_CM_EVENT_CONNECT_ERROR",   "RDMA_CM_EVENT_UNREACHABLE",
      "RDMA_CM_EVENT_REJECTED",        "RDMA_CM_EVENT_ESTABLISHED",
      "RDMA_CM_EVENT_DISCONNECTED",    "RDMA_CM_EVENT_DEVICE_REMOVAL",
      "RDMA_CM_EVENT_MULTICAST_JOIN",  "RDMA_CM_EVENT_MULTICAST_ERROR",
      "RDMA_CM_EVENT_ADDR_CHANGE",     "RDMA_CM_EVENT_TIMEWAIT_EXIT"};
  const auto i = static_cast<unsigned>(event);
  return i < sizeof names / sizeof names[0] ? names[i] : "UNKNOWN EVENT";
}

// ---- Ids ----

BRAID_EXPORT int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** out, void* context,
                                rdma_port_space ps) {
  if (out == nullptr) return fail(EINVAL);
  if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB && ps != RDMA_PS_IPOIB) {
    return fail(EINVAL);
  }
  if (open_devices() != 0) return fail(ENODEV);
  auto* id = new Id{};
  if (channel == nullptr) {
    id->chan = new_channel(true);
    if (id->chan == nullptr) {
      delete id;
      return fail(EMFILE);
    }
    id->own_channel = true;
  } else {
    id->chan = reinterpret_cast<Channel*>(channel);
  }
  id->pub.channel = &id->chan->pub;
  id->pub.context = context;
  id->pub.ps = ps;
  id->pub.qp_type = (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) ? IBV_QPT_UD : IBV_QPT_RC;
  std::lock_guard<std::mutex> g(cm().mu);
  id->local_id = allocate_local_id();
  cm().by_local_id[id->local_id] = id;
  cm().ids.push_back(id);
  *out = &id->pub;
  return 0;
}

BRAID_EXPORT int rdma_destroy_id(rdma_cm_id* pub) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  Cm& c = cm();
  std::unique_lock<std::mutex> lock(c.mu);
  // What the peer must hear: a connection goes (DREQ), a request not
  // accepted is refused (REJ).
  switch (id->state) {
    case State::kEstablished:
      send_simple(id, cmw::Type::kDreq);
      break;
    case State::kRequested:
    case State::kAccepting:
    case State::kConnecting:  // (no server id yet: the REJ names our REQ's)
    case State::kResponded:
      send_simple(id, cmw::Type::kRej, cmw::kRejectConsumer);
      break;
    default:
      break;
  }
  id->destroying = true;
  id->retransmit = false;
  if (id->listener != nullptr) {
    --id->listener->requests;
    id->listener = nullptr;
  }
  // Requests still waiting on a listener that goes: refused.
  for (Id* other : c.ids) {
    if (other->listener == id) other->listener = nullptr;
  }
  // Events not yet read that are about this id go with it.
  auto& q = id->chan->queue;
  for (auto it = q.begin(); it != q.end();) {
    Event* e = *it;
    if (e->pub.id == pub || e->counted == id) {
      if (e->pub.event == RDMA_CM_EVENT_CONNECT_REQUEST && e->pub.id != pub) {
        // A request to a listener going away: its id goes too.
        Id* req = id_of(e->pub.id);
        send_simple(req, cmw::Type::kRej, cmw::kRejectConsumer);
        req->destroying = true;
        c.by_local_id.erase(req->local_id);
        if (req->remote_id != 0) c.by_peer.erase((uint64_t{req->peer_ip} << 32) | req->remote_id);
        c.ids.remove(req);
        delete req;
      }
      delete e;
      it = q.erase(it);
    } else {
      ++it;
    }
  }
  unsignal(id->chan);
  if (id->pub.event != nullptr) {
    ack(reinterpret_cast<Event*>(id->pub.event));
    id->pub.event = nullptr;
  }
  id->acked.wait(lock, [&] { return id->events_out <= 0; });
  release_port(id);
  c.by_local_id.erase(id->local_id);
  if (id->remote_id != 0) {
    auto it = c.by_peer.find((uint64_t{id->peer_ip} << 32) | id->remote_id);
    if (it != c.by_peer.end() && it->second == id) c.by_peer.erase(it);
  }
  c.ids.remove(id);
  if (id->own_channel) free_channel(id->chan);
  delete id;
  return 0;
}

BRAID_EXPORT int rdma_migrate_id(rdma_cm_id* pub, rdma_event_channel* channel) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  Channel* to = channel ? reinterpret_cast<Channel*>(channel) : new_channel(true);
  if (to == nullptr) return fail(EMFILE);
  std::unique_lock<std::mutex> lock(cm().mu);
  if (to == id->chan) return 0;
  // A sync id's last event (kept in id->event) is acknowledged here, as
  // rdma-core does: libfabric migrates an id right after a sync resolve.
  if (id->own_channel && id->pub.event != nullptr) {
    ack(reinterpret_cast<Event*>(id->pub.event));
    id->pub.event = nullptr;
  }
  id->acked.wait(lock, [&] { return id->events_out <= 0; });
  Channel* from = id->chan;
  // The id's events, and a listener's requests (theirs go with it).
  for (Id* other : cm().ids) {
    if (other->listener == id && other->chan == from) {
      other->chan = to;
      other->pub.channel = &to->pub;
    }
  }
  for (auto it = from->queue.begin(); it != from->queue.end();) {
    if ((*it)->pub.id == pub || (*it)->counted == id) {
      push_event(to, *it);
      it = from->queue.erase(it);
    } else {
      ++it;
    }
  }
  unsignal(from);
  id->chan = to;
  id->pub.channel = &to->pub;
  if (id->own_channel) free_channel(from);
  id->own_channel = channel == nullptr;
  return 0;
}

BRAID_EXPORT int rdma_bind_addr(rdma_cm_id* pub, sockaddr* addr) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  uint32_t ip = 0;
  uint16_t port = 0;
  if (!ipv4(addr, &ip, &port)) return fail(EAFNOSUPPORT);
  std::lock_guard<std::mutex> g(cm().mu);
  if (id->state != State::kIdle) return fail(EINVAL);
  Device* d = nullptr;
  if (ip != 0 && (ip >> 24) != 127) {
    d = device_for(ip);
    if (d == nullptr) return fail(EADDRNOTAVAIL);
  }
  const int err = hold_port(id, port);
  if (err != 0) return fail(err);
  if (d != nullptr) attach(id, d);
  id->local_ip = ip;
  id->state = State::kBound;
  fill_route(id);
  return 0;
}

BRAID_EXPORT int rdma_resolve_addr(rdma_cm_id* pub, sockaddr* src, sockaddr* dst, int timeout_ms) {
  (void)timeout_ms;  // nothing here waits: the neighbour is resolved with the route's first use
  if (pub == nullptr || dst == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  uint32_t dip = 0, sip = 0;
  uint16_t dport = 0, sport = 0;
  if (!ipv4(dst, &dip, &dport) || (src != nullptr && !ipv4(src, &sip, &sport))) {
    return fail(EAFNOSUPPORT);
  }
  std::unique_lock<std::mutex> lock(cm().mu);
  if (id->state != State::kIdle && id->state != State::kBound) return fail(EINVAL);
  // The device: the one bound to, the source's, the destination's own
  // (a loop to ourselves), else the first.
  Device* d = id->dev;
  if (d == nullptr && sip != 0) {
    d = device_for(sip);
    if (d == nullptr) return fail(EADDRNOTAVAIL);
  }
  if (d == nullptr) d = device_for(dip);
  if (d == nullptr && !cm().devices.empty()) d = cm().devices.front().get();
  if (d == nullptr) return fail(ENODEV);
  if (!id->holds_port) {
    const int err = hold_port(id, sport);
    if (err != 0) return fail(err);
  }
  attach(id, d);
  id->peer_ip = dip;
  id->peer_port = dport;
  id->state = State::kAddrResolved;
  fill_route(id);
  Event* e = new Event{};
  e->pub.id = pub;
  e->pub.event = RDMA_CM_EVENT_ADDR_RESOLVED;
  e->counted = id;
  push_event(id->chan, e);
  return complete(id, lock);
}

BRAID_EXPORT int rdma_resolve_route(rdma_cm_id* pub, int timeout_ms) {
  (void)timeout_ms;
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  std::unique_lock<std::mutex> lock(cm().mu);
  if (id->state != State::kAddrResolved) return fail(EINVAL);
  // The neighbour's address: the AH to its QP 1 resolves it (ARP).
  ah_for(id->dev, id->peer_ip);
  id->state = State::kRouteResolved;
  id->pub.route.num_paths = 1;
  id->pub.route.path_rec = &id->path;
  Event* e = new Event{};
  e->pub.id = pub;
  e->pub.event = RDMA_CM_EVENT_ROUTE_RESOLVED;
  e->counted = id;
  push_event(id->chan, e);
  return complete(id, lock);
}

BRAID_EXPORT int rdma_listen(rdma_cm_id* pub, int backlog) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  std::lock_guard<std::mutex> g(cm().mu);
  if (id->state == State::kIdle) {  // an unbound id listens on any address, a port of its own
    const int err = hold_port(id, 0);
    if (err != 0) return fail(err);
    id->state = State::kBound;
    fill_route(id);
  }
  if (id->state != State::kBound) return fail(EINVAL);
  id->backlog = backlog > 0 ? std::min(backlog, 4096) : 1024;
  id->state = State::kListening;
  return 0;
}

BRAID_EXPORT int rdma_connect(rdma_cm_id* pub, rdma_conn_param* param) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  std::unique_lock<std::mutex> lock(cm().mu);
  if (id->state != State::kRouteResolved && id->state != State::kAddrResolved) return fail(EINVAL);
  if (pub->qp_type != IBV_QPT_RC) return fail(EOPNOTSUPP);  // UD's SIDR: not in Braid
  if (pub->qp == nullptr && param == nullptr) return fail(EINVAL);
  Device* d = id->dev;
  cmw::Message m{};
  m.type = cmw::Type::kReq;
  m.port_space = static_cast<uint16_t>(pub->ps);
  m.src_port = id->local_port;
  m.dst_port = id->peer_port;
  m.qp_type = IBV_QPT_RC;
  if (param != nullptr) {
    const uint8_t rr = resources(param->responder_resources, d->max_rd_atomic);
    const uint8_t id_ = resources(param->initiator_depth, d->max_init_rd_atomic);
    if (rr > d->max_rd_atomic || id_ > d->max_init_rd_atomic) return fail(EINVAL);
    if (param->private_data_len > cmw::max_private(cmw::Type::kReq)) return fail(EINVAL);
    id->responder_resources = rr;
    id->initiator_depth = id_;
    id->retry_count = std::min<uint8_t>(param->retry_count, 7);
    id->rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
    id->flow_control = param->flow_control;
    m.private_len = param->private_data_len;
    if (m.private_len && param->private_data) {
      std::memcpy(m.private_data, param->private_data, m.private_len);
    }
    m.qp_num = pub->qp ? pub->qp->qp_num : param->qp_num;
    m.srq = pub->qp ? (pub->qp->srq != nullptr) : param->srq;
  } else {
    id->responder_resources = d->max_rd_atomic;
    id->initiator_depth = d->max_init_rd_atomic;
    id->retry_count = 7;
    id->rnr_retry_count = 7;
    m.qp_num = pub->qp->qp_num;
    m.srq = pub->qp->srq != nullptr;
  }
  std::random_device rd;
  id->psn = rd() & 0xffffff;
  m.psn = id->psn;
  m.responder_resources = id->responder_resources;
  m.initiator_depth = id->initiator_depth;
  m.retry_count = id->retry_count;
  m.rnr_retry_count = id->rnr_retry_count;
  m.flow_control = id->flow_control;
  id->state = State::kConnecting;
  send_tracked(id, m);
  return complete(id, lock);
}

BRAID_EXPORT int rdma_accept(rdma_cm_id* pub, rdma_conn_param* param) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  std::unique_lock<std::mutex> lock(cm().mu);
  if (id->state == State::kListening) return fail(EINVAL);
  if (id->state != State::kRequested) return fail(EINVAL);
  if (pub->qp == nullptr && param == nullptr) return fail(EINVAL);
  Device* d = id->dev;
  // Responder resources and initiator depth: as asked (255: up to the
  // request and the device), else the request's within the device's.
  uint8_t rr = std::min(id->responder_resources, d->max_rd_atomic);
  uint8_t idp = std::min(id->initiator_depth, d->max_init_rd_atomic);
  cmw::Message m{};
  m.type = cmw::Type::kRep;
  m.rnr_retry_count = 7;
  if (param != nullptr) {
    if (param->responder_resources != RDMA_MAX_RESP_RES) rr = param->responder_resources;
    if (param->initiator_depth != RDMA_MAX_INIT_DEPTH) idp = param->initiator_depth;
    if (rr > d->max_rd_atomic || idp > d->max_init_rd_atomic) return fail(EINVAL);
    if (param->private_data_len > cmw::max_private(cmw::Type::kRep)) return fail(EINVAL);
    m.private_len = param->private_data_len;
    if (m.private_len && param->private_data) {
      std::memcpy(m.private_data, param->private_data, m.private_len);
    }
    m.rnr_retry_count = std::min<uint8_t>(param->rnr_retry_count, 7);
    m.flow_control = param->flow_control;
  }
  id->responder_resources = rr;
  id->initiator_depth = idp;
  std::random_device rd;
  id->psn = rd() & 0xffffff;
  if (pub->qp != nullptr) {
    const int err = connect_qp(id);
    if (err != 0) return fail(err);
    m.qp_num = pub->qp->qp_num;
    m.srq = pub->qp->srq != nullptr;
  } else {
    m.qp_num = param->qp_num;
    m.srq = param->srq;
  }
  m.psn = id->psn;
  m.responder_resources = rr;
  m.initiator_depth = idp;
  if (id->listener != nullptr) {
    --id->listener->requests;
    id->listener = nullptr;
  }
  id->state = State::kAccepting;
  send_tracked(id, m);
  if (pub->qp_type == IBV_QPT_UD) return 0;
  return complete(id, lock);
}

BRAID_EXPORT int rdma_reject(rdma_cm_id* pub, const void* private_data, uint8_t len) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  std::lock_guard<std::mutex> g(cm().mu);
  if (id->state != State::kRequested) return fail(EINVAL);
  if (len > cmw::max_private(cmw::Type::kRej)) return fail(EINVAL);
  // Kept: a REQ resent because this REJ was lost gets it again.
  id->last =
      send_simple(id, cmw::Type::kRej, cmw::kRejectConsumer, private_data, private_data ? len : 0);
  if (id->listener != nullptr) {
    --id->listener->requests;
    id->listener = nullptr;
  }
  id->state = State::kRejected;
  return 0;
}

BRAID_EXPORT int rdma_reject_ece(rdma_cm_id* pub, const void* private_data, uint8_t len) {
  return rdma_reject(pub, private_data, len);
}

BRAID_EXPORT int rdma_establish(rdma_cm_id* pub) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  std::lock_guard<std::mutex> g(cm().mu);
  if (pub->qp != nullptr || id->state != State::kResponded) return fail(EINVAL);
  send_simple(id, cmw::Type::kRtu);
  id->state = State::kEstablished;
  return 0;
}

BRAID_EXPORT int rdma_disconnect(rdma_cm_id* pub) {
  if (pub == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  std::unique_lock<std::mutex> lock(cm().mu);
  switch (id->state) {
    case State::kEstablished:
    case State::kAccepting: {
      qp_to_error(id);
      cmw::Message m{};
      m.type = cmw::Type::kDreq;
      m.remote_id = id->remote_id;
      id->state = State::kDisconnecting;
      send_tracked(id, m);
      return complete(id, lock);
    }
    case State::kDisconnecting:
    case State::kDisconnected:
      // The peer went first (we answered its DREQ), or we did already.
      qp_to_error(id);
      return 0;
    case State::kConnecting:
    case State::kResponded:
      qp_to_error(id);
      send_simple(id, cmw::Type::kRej, cmw::kRejectConsumer);
      id->retransmit = false;
      id->state = State::kRejected;
      return 0;
    default:
      return fail(EINVAL);
  }
}

BRAID_EXPORT int rdma_notify(rdma_cm_id* pub, ibv_event_type) {
  return pub == nullptr ? fail(EINVAL) : 0;
}

// ---- QPs and SRQs for ids ----

BRAID_EXPORT int rdma_create_qp_ex(rdma_cm_id* pub, ibv_qp_init_attr_ex* attr) {
  if (pub == nullptr || attr == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> g(cm().mu);
  return create_qp_common(id_of(pub), attr);
}

BRAID_EXPORT int rdma_create_qp(rdma_cm_id* pub, ibv_pd* pd, ibv_qp_init_attr* attr) {
  if (pub == nullptr || attr == nullptr) return fail(EINVAL);
  ibv_qp_init_attr_ex ax{};
  ax.qp_context = attr->qp_context;
  ax.send_cq = attr->send_cq;
  ax.recv_cq = attr->recv_cq;
  ax.srq = attr->srq;
  ax.cap = attr->cap;
  ax.qp_type = attr->qp_type;
  ax.sq_sig_all = attr->sq_sig_all;
  ax.comp_mask = IBV_QP_INIT_ATTR_PD;
  ax.pd = pd;
  std::lock_guard<std::mutex> g(cm().mu);
  const int r = create_qp_common(id_of(pub), &ax);
  if (r == 0) {
    attr->send_cq = ax.send_cq;
    attr->recv_cq = ax.recv_cq;
    attr->srq = ax.srq;
    attr->cap = ax.cap;
  }
  return r;
}

BRAID_EXPORT void rdma_destroy_qp(rdma_cm_id* pub) {
  if (pub == nullptr) return;
  std::lock_guard<std::mutex> g(cm().mu);
  if (pub->qp != nullptr) ibv_destroy_qp(pub->qp);
  pub->qp = nullptr;
  destroy_own_cqs(id_of(pub));
}

BRAID_EXPORT int rdma_create_srq_ex(rdma_cm_id* pub, ibv_srq_init_attr_ex* attr) {
  if (pub == nullptr || attr == nullptr || pub->verbs == nullptr) return fail(EINVAL);
  ibv_pd* pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd ? attr->pd : pub->pd;
  if (pd == nullptr) return fail(EINVAL);
  ibv_srq_init_attr a{};
  a.srq_context = attr->srq_context;
  a.attr = attr->attr;
  ibv_srq* srq = ibv_create_srq(pd, &a);
  if (srq == nullptr) return -1;
  attr->attr = a.attr;
  pub->srq = srq;
  pub->pd = pd;
  return 0;
}

BRAID_EXPORT int rdma_create_srq(rdma_cm_id* pub, ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (pub == nullptr || attr == nullptr) return fail(EINVAL);
  ibv_srq_init_attr_ex ax{};
  ax.srq_context = attr->srq_context;
  ax.attr = attr->attr;
  ax.comp_mask = IBV_SRQ_INIT_ATTR_PD;
  ax.pd = pd;
  const int r = rdma_create_srq_ex(pub, &ax);
  if (r == 0) attr->attr = ax.attr;
  return r;
}

BRAID_EXPORT void rdma_destroy_srq(rdma_cm_id* pub) {
  if (pub == nullptr || pub->srq == nullptr) return;
  ibv_destroy_srq(pub->srq);
  pub->srq = nullptr;
}

BRAID_EXPORT int rdma_init_qp_attr(rdma_cm_id* pub, ibv_qp_attr* qp_attr, int* qp_attr_mask) {
  if (pub == nullptr || qp_attr == nullptr || qp_attr_mask == nullptr) return fail(EINVAL);
  std::lock_guard<std::mutex> g(cm().mu);
  const int err = qp_attr_for(id_of(pub), qp_attr, qp_attr_mask);
  return err ? fail(err) : 0;
}

// ---- Endpoints (synchronous ids) ----

BRAID_EXPORT int rdma_create_ep(rdma_cm_id** out, rdma_addrinfo* res, ibv_pd* pd,
                                ibv_qp_init_attr* qp_init_attr) {
  if (out == nullptr || res == nullptr) return fail(EINVAL);
  rdma_cm_id* pub = nullptr;
  if (rdma_create_id(nullptr, &pub, nullptr, static_cast<rdma_port_space>(res->ai_port_space)) !=
      0) {
    return -1;
  }
  Id* id = id_of(pub);
  pub->qp_type = static_cast<ibv_qp_type>(res->ai_qp_type);
  int r = 0;
  if (res->ai_flags & RAI_PASSIVE) {
    r = rdma_bind_addr(pub, res->ai_src_addr);
    if (r == 0) {
      if (pd != nullptr) pub->pd = pd;
      if (qp_init_attr != nullptr) {
        id->ep_attr = std::make_unique<ibv_qp_init_attr>(*qp_init_attr);
        id->ep_attr->qp_type = pub->qp_type;
      }
    }
  } else {
    r = rdma_resolve_addr(pub, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (r == 0) r = rdma_resolve_route(pub, 2000);
    if (r == 0 && qp_init_attr != nullptr) {
      qp_init_attr->qp_type = pub->qp_type;
      r = rdma_create_qp(pub, pd, qp_init_attr);
    }
  }
  if (r != 0) {
    const int err = errno;
    rdma_destroy_qp(pub);
    rdma_destroy_id(pub);
    return fail(err);
  }
  *out = pub;
  return 0;
}

BRAID_EXPORT void rdma_destroy_ep(rdma_cm_id* pub) {
  if (pub == nullptr) return;
  rdma_destroy_qp(pub);
  rdma_destroy_srq(pub);
  rdma_destroy_id(pub);
}

BRAID_EXPORT int rdma_get_request(rdma_cm_id* listen, rdma_cm_id** out) {
  if (listen == nullptr || out == nullptr) return fail(EINVAL);
  Id* l = id_of(listen);
  std::unique_lock<std::mutex> lock(cm().mu);
  if (!l->own_channel) return fail(EINVAL);
  if (listen->event != nullptr) {
    ack(reinterpret_cast<Event*>(listen->event));
    listen->event = nullptr;
  }
  int err = 0;
  Event* e = next_event(l->chan, lock, &err);
  if (e == nullptr) return fail(err);
  if (e->pub.event != RDMA_CM_EVENT_CONNECT_REQUEST) {
    listen->event = &e->pub;
    if (e->pub.event == RDMA_CM_EVENT_REJECTED) return fail(ECONNREFUSED);
    return fail(e->pub.status < 0 ? -e->pub.status : EINVAL);
  }
  Id* id = id_of(e->pub.id);
  // The request's id gets a channel of its own (synchronous, as its listener).
  Channel* ch = new_channel(true);
  if (ch == nullptr) {
    ack(e);
    return fail(EMFILE);
  }
  id->chan = ch;
  id->own_channel = true;
  id->pub.channel = &ch->pub;
  id->pub.event = &e->pub;
  if (listen->pd != nullptr) id->pub.pd = listen->pd;
  if (l->ep_attr) {
    ibv_qp_init_attr a = *l->ep_attr;
    lock.unlock();
    if (rdma_create_qp(&id->pub, listen->pd, &a) != 0) {
      const int e2 = errno;
      rdma_destroy_id(&id->pub);
      return fail(e2);
    }
  }
  *out = &id->pub;
  return 0;
}

// ---- Options, ports, devices ----

BRAID_EXPORT int rdma_set_option(rdma_cm_id* pub, int level, int optname, void* optval,
                                 size_t optlen) {
  if (pub == nullptr || optval == nullptr) return fail(EINVAL);
  Id* id = id_of(pub);
  if (level == RDMA_OPTION_ID) {
    switch (optname) {
      case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t)) return fail(EINVAL);
        id->tos = *static_cast<uint8_t*>(optval);
        return 0;
      case RDMA_OPTION_ID_REUSEADDR:
      case RDMA_OPTION_ID_AFONLY:
      case RDMA_OPTION_ID_ACK_TIMEOUT:
        return optlen == sizeof(int) || optlen == sizeof(uint8_t) ? 0 : fail(EINVAL);
      default:
        return fail(ENOSYS);
    }
  }
  if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) return 0;
  return fail(ENOSYS);
}

BRAID_EXPORT uint16_t rdma_get_src_port(rdma_cm_id* pub) {
  if (pub == nullptr) return 0;
  return reinterpret_cast<sockaddr_in*>(&pub->route.addr.src_addr)->sin_port;
}

BRAID_EXPORT uint16_t rdma_get_dst_port(rdma_cm_id* pub) {
  if (pub == nullptr) return 0;
  return reinterpret_cast<sockaddr_in*>(&pub->route.addr.dst_addr)->sin_port;
}

BRAID_EXPORT ibv_context** rdma_get_devices(int* num_devices) {
  if (open_devices() != 0) {
    if (num_devices) *num_devices = 0;
    auto** none = static_cast<ibv_context**>(calloc(1, sizeof(ibv_context*)));
    return none;
  }
  std::lock_guard<std::mutex> g(cm().mu);
  const size_t n = cm().devices.size();
  auto** list = static_cast<ibv_context**>(calloc(n + 1, sizeof(ibv_context*)));
  if (list == nullptr) return nullptr;
  for (size_t i = 0; i < n; ++i) list[i] = cm().devices[i]->ctx;
  if (num_devices) *num_devices = static_cast<int>(n);
  return list;
}

BRAID_EXPORT void rdma_free_devices(ibv_context** list) {
  free(list);
}

// ---- Not in Braid: multicast, ECE ----

BRAID_EXPORT int rdma_join_multicast(rdma_cm_id*, sockaddr*, void*) {
  return fail(ENOSYS);
}
BRAID_EXPORT int rdma_join_multicast_ex(rdma_cm_id*, rdma_cm_join_mc_attr_ex*, void*) {
  return fail(ENOSYS);
}
BRAID_EXPORT int rdma_leave_multicast(rdma_cm_id*, sockaddr*) {
  return fail(ENOSYS);
}
BRAID_EXPORT int rdma_set_local_ece(rdma_cm_id*, ibv_ece*) {
  return fail(EOPNOTSUPP);
}
BRAID_EXPORT int rdma_get_remote_ece(rdma_cm_id*, ibv_ece*) {
  return fail(EOPNOTSUPP);
}

// Messages dropped by the CM (malformed, from strangers, out of state):
// Braid's own (BRAID_PRIVATE_1.0), for tests and diagnostics.
BRAID_EXPORT uint64_t braid_rdmacm_dropped(void) {
  std::lock_guard<std::mutex> g(cm().mu);
  return cm().drops;
}

__attribute__((destructor)) static void braid_rdmacm_unload() {
  shutdown_service();
}

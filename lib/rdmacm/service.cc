// Devices, QP 1 and the service thread of Braid's librdmacm: CM messages
// out and in, their retransmission, and the events they raise.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "rdmacm/rdmacm_internal.h"
#include "rdmacm/service.h"

// Braid's libibverbs: a UD QP numbered 1 (BRAID_PRIVATE_1.0).
extern "C" ibv_qp* braid_ibv_create_cm_qp(ibv_pd* pd, ibv_qp_init_attr* attr);

namespace braid::rdmacm {
namespace {

constexpr int kRecvSlots = 64;
constexpr int kSendSlots = 64;
constexpr size_t kGrh = 40;
constexpr size_t kSlot = 2048;  // a GRH and the largest CM message, rounded up

int retries() {
  static const int n = [] {
    const char* e = std::getenv("BRAID_RDMACM_RETRIES");
    const int v = e ? std::atoi(e) : 0;
    return v > 0 && v < 100 ? v : 8;
  }();
  return n;
}

// 100 ms, doubling to 1 s: 8 tries wait 5.5 s in all.
std::chrono::milliseconds backoff(int tries) {
  return std::chrono::milliseconds(std::min(100 << std::min(tries, 4), 1000));
}

// BRAID_RDMACM_TRACE=1: each CM message sent, taken and dropped, on stderr.
bool tracing() {
  static const bool on = [] {
    const char* e = std::getenv("BRAID_RDMACM_TRACE");
    return e != nullptr && *e != '\0' && *e != '0';
  }();
  return on;
}

const char* type_name(cm::Type t) {
  static const char* const names[] = {"?", "REQ", "REP", "RTU", "REJ", "MRA", "DREQ", "DREP"};
  const auto i = static_cast<unsigned>(t);
  return i < 8 ? names[i] : "?";
}

void trace(const char* what, uint32_t ip, const cm::Message& m) {
  if (!tracing()) return;
  std::fprintf(stderr, "braid rdmacm: %s %s %u.%u.%u.%u local %08x remote %08x qpn %u reason %u\n",
               what, type_name(m.type), ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255,
               m.local_id, m.remote_id, m.qp_num, m.reason);
}

void drop(const char* why, uint32_t ip, const cm::Message& m) {
  ++cm().drops;
  if (tracing()) {
    std::fprintf(stderr, "braid rdmacm: dropped (%s): ", why);
    trace("from", ip, m);
  }
}

bool post_recv(Device* d, int slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(d->buffers.data() + size_t(slot) * kSlot),
              static_cast<uint32_t>(kSlot), d->mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(d->qp1, &wr, &bad) == 0;
}

void wake() {
  uint64_t one = 1;
  if (cm().wake_fd >= 0) (void)!write(cm().wake_fd, &one, sizeof one);
}

uint32_t ip_of_gid(const ibv_gid& g) {
  return (uint32_t{g.raw[12]} << 24) | (uint32_t{g.raw[13]} << 16) | (uint32_t{g.raw[14]} << 8) |
         g.raw[15];
}

// Opens one device: its context, PD, QP 1 and receive buffers. Null (and
// the context closed) when any of it fails.
std::unique_ptr<Device> open_device(ibv_device* dev) {
  auto d = std::make_unique<Device>();
  d->ctx = ibv_open_device(dev);
  if (d->ctx == nullptr) return nullptr;
  ibv_device_attr da{};
  ibv_port_attr pa{};
  if (ibv_query_device(d->ctx, &da) != 0 || ibv_query_port(d->ctx, 1, &pa) != 0 ||
      ibv_query_gid(d->ctx, 1, 0, &d->gid) != 0) {
    ibv_close_device(d->ctx);
    return nullptr;
  }
  d->ip = ip_of_gid(d->gid);
  d->mtu = pa.active_mtu;
  d->max_rd_atomic = static_cast<uint8_t>(std::min(da.max_qp_rd_atom, 255));
  d->max_init_rd_atomic = static_cast<uint8_t>(std::min(da.max_qp_init_rd_atom, 255));
  d->pd = ibv_alloc_pd(d->ctx);
  d->ch = d->pd ? ibv_create_comp_channel(d->ctx) : nullptr;
  d->cq = d->ch ? ibv_create_cq(d->ctx, kRecvSlots + kSendSlots, nullptr, d->ch, 0) : nullptr;
  if (d->cq != nullptr) {
    ibv_qp_init_attr qa{};
    qa.send_cq = d->cq;
    qa.recv_cq = d->cq;
    qa.qp_type = IBV_QPT_UD;
    qa.cap = {kSendSlots, kRecvSlots, 1, 1, 0};
    d->qp1 = braid_ibv_create_cm_qp(d->pd, &qa);
  }
  d->buffers.assign(size_t(kRecvSlots + kSendSlots) * kSlot, 0);
  if (d->qp1 != nullptr) {
    d->mr = ibv_reg_mr(d->pd, d->buffers.data(), d->buffers.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  bool ok = d->mr != nullptr;
  if (ok) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = cm::kQkey;
    ok = ibv_modify_qp(d->qp1, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) ==
         0;
    a.qp_state = IBV_QPS_RTR;
    ok = ok && ibv_modify_qp(d->qp1, &a, IBV_QP_STATE) == 0;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    ok = ok && ibv_modify_qp(d->qp1, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0;
    for (int i = 0; ok && i < kRecvSlots; ++i) ok = post_recv(d.get(), i);
    ok = ok && ibv_req_notify_cq(d->cq, 0) == 0;
    // The service thread drains the channel without blocking.
    ok = ok && fcntl(d->ch->fd, F_SETFL, fcntl(d->ch->fd, F_GETFL) | O_NONBLOCK) == 0;
  }
  if (!ok) {
    std::fprintf(stderr, "braid rdmacm: cannot set up QP 1 on %s: %s\n", ibv_get_device_name(dev),
                 std::strerror(errno));
    close_device(d.get());
    return nullptr;
  }
  for (int i = 0; i < kSendSlots; ++i) d->free_send.push_back(kRecvSlots + i);
  return d;
}

// ---- Receiving ----

Event* new_event(Id* id, rdma_cm_event_type type, int status) {
  auto* e = new Event{};
  e->pub.id = &id->pub;
  e->pub.event = type;
  e->pub.status = status;
  e->counted = id;
  return e;
}

// The connection parameters an event shows, from a REQ or REP: the peer's
// resources as the receiver sees them (responder and initiator swapped).
void fill_conn(Event* e, const cm::Message& m, size_t field) {
  rdma_conn_param& p = e->pub.param.conn;
  std::memcpy(e->data, m.private_data, m.private_len);
  p.private_data = e->data;
  p.private_data_len = static_cast<uint8_t>(field);  // the field's size, as rdma_cm reports
  p.responder_resources = m.initiator_depth;
  p.initiator_depth = m.responder_resources;
  p.flow_control = m.flow_control;
  p.retry_count = m.retry_count;
  p.rnr_retry_count = m.rnr_retry_count;
  p.srq = m.srq;
  p.qp_num = m.qp_num;
}

void set_addr(sockaddr_storage* sa, uint32_t ip, uint16_t port) {
  auto* in = reinterpret_cast<sockaddr_in*>(sa);
  std::memset(sa, 0, sizeof *sa);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  in->sin_addr.s_addr = htonl(ip);
}

// Answers to messages naming no connection of ours (a REJ to a REQ for no
// listener, a DREP to a DREQ for a connection gone): a header each, no more
// than what came, and at most kStrangerBurst at once, kStrangerRate a
// second, so that forged sources cannot turn us into a flood (or fill the
// address handle cache: see ah_for).
constexpr double kStrangerRate = 200;
constexpr double kStrangerBurst = 64;

bool may_answer_stranger() {
  static double tokens = kStrangerBurst;
  static Clock::time_point last = Clock::now();
  const Clock::time_point now = Clock::now();
  tokens = std::min(kStrangerBurst,
                    tokens + std::chrono::duration<double>(now - last).count() * kStrangerRate);
  last = now;
  if (tokens < 1) return false;
  tokens -= 1;
  return true;
}

void reject_stranger(Device* d, uint32_t ip, const cm::Message& req, uint16_t reason) {
  if (!may_answer_stranger()) {
    drop("stranger's answers over their rate", ip, req);
    return;
  }
  cm::Message m{};
  m.type = cm::Type::kRej;
  m.reason = reason;
  m.local_id = 0xffffffffu;  // no id of ours stands behind it
  m.remote_id = req.local_id;
  send_message(d, ip, m);
}

void on_req(Device* d, uint32_t ip, const cm::Message& m) {
  Cm& c = cm();
  auto dup = c.by_peer.find((uint64_t{ip} << 32) | m.local_id);
  if (dup != c.by_peer.end()) {
    Id* id = dup->second;
    if (id->state == State::kRequested) {
      send_simple(id, cm::Type::kMra);
    } else if (id->state == State::kAccepting) {
      send_message(d, ip, id->last);  // our REP again
    } else if (id->state == State::kRejected && id->last.type == cm::Type::kRej) {
      send_message(d, ip, id->last);  // our REJ was lost
    } else {
      drop("REQ already answered", ip, m);
    }
    return;
  }
  auto lit = c.ports.find((uint32_t{m.port_space} << 16) | m.dst_port);
  Id* l = lit == c.ports.end() ? nullptr : lit->second;
  if (l == nullptr || l->destroying || l->state != State::kListening ||
      (l->dev != nullptr && l->dev != d) || (m.qp_type != IBV_QPT_RC) ||
      l->pub.qp_type != IBV_QPT_RC) {
    reject_stranger(d, ip, m, cm::kRejectNoListener);
    return;
  }
  if (l->requests >= l->backlog) {
    drop("backlog full", ip, m);  // the client tries again
    return;
  }
  auto* id = new Id{};
  id->pub.verbs = d->ctx;
  id->pub.context = l->pub.context;
  id->pub.ps = l->pub.ps;
  id->pub.qp_type = l->pub.qp_type;
  id->pub.port_num = 1;
  id->pub.pd = d->pd;
  id->chan = l->chan;
  id->pub.channel = &l->chan->pub;
  id->dev = d;
  id->state = State::kRequested;
  id->local_id = allocate_local_id();
  id->remote_id = m.local_id;
  id->local_ip = d->ip;
  id->local_port = m.dst_port;
  id->peer_ip = ip;
  id->peer_port = m.src_port;
  id->peer_qpn = m.qp_num;
  id->peer_psn = m.psn;
  id->retry_count = m.retry_count;
  id->rnr_retry_count = m.rnr_retry_count;
  id->peer_rnr_retry = m.rnr_retry_count;
  id->flow_control = m.flow_control;
  // Until accepted: what the client asked (ours is the mirror of it).
  id->responder_resources = m.initiator_depth;
  id->initiator_depth = m.responder_resources;
  id->listener = l;
  fill_route(id);
  ++l->requests;
  c.ids.push_back(id);
  c.by_local_id[id->local_id] = id;
  c.by_peer[(uint64_t{ip} << 32) | m.local_id] = id;
  Event* e = new_event(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
  e->pub.listen_id = &l->pub;
  e->counted = l;
  fill_conn(e, m, cm::max_private(cm::Type::kReq));
  push_event(l->chan, e);
}

void on_rep(Id* id, const cm::Message& m) {
  Cm& c = cm();
  if (id->state == State::kEstablished || id->state == State::kResponded) {
    if (id->state == State::kEstablished) send_simple(id, cm::Type::kRtu);  // our RTU was lost
    return;
  }
  if (id->state != State::kConnecting) {
    drop("REP out of state", id->peer_ip, m);
    return;
  }
  id->retransmit = false;
  id->remote_id = m.local_id;
  c.by_peer[(uint64_t{id->peer_ip} << 32) | m.local_id] = id;
  id->peer_qpn = m.qp_num;
  id->peer_psn = m.psn;
  id->peer_rnr_retry = m.rnr_retry_count;
  // Our resources as the server granted them.
  id->responder_resources = std::min(id->responder_resources, m.initiator_depth);
  id->initiator_depth = std::min(id->initiator_depth, m.responder_resources);
  Event* e = nullptr;
  if (id->pub.qp != nullptr) {
    if (connect_qp(id) != 0) {
      send_simple(id, cm::Type::kRej, cm::kRejectConsumer);
      id->state = State::kRejected;
      e = new_event(id, RDMA_CM_EVENT_CONNECT_ERROR, -EINVAL);
      push_event(id->chan, e);
      return;
    }
    send_simple(id, cm::Type::kRtu);
    id->state = State::kEstablished;
    e = new_event(id, RDMA_CM_EVENT_ESTABLISHED, 0);
  } else {
    id->state = State::kResponded;  // rdma_establish sends the RTU
    e = new_event(id, RDMA_CM_EVENT_CONNECT_RESPONSE, 0);
  }
  fill_conn(e, m, cm::max_private(cm::Type::kRep));
  push_event(id->chan, e);
}

// A REJ: the client's request refused, or (server side) the client gave up
// on a request or on our REP. An established connection whose peer refuses
// it after all (our RTU was lost, its id went) is disconnected.
void on_rej(Id* id, const cm::Message& m) {
  if (id->state == State::kEstablished) {
    id->state = State::kDisconnected;
    push_event(id->chan, new_event(id, RDMA_CM_EVENT_DISCONNECTED, 0));
    return;
  }
  if (id->state != State::kConnecting && id->state != State::kAccepting &&
      id->state != State::kResponded && id->state != State::kRequested) {
    drop("REJ out of state", id->peer_ip, m);
    return;
  }
  if (id->listener != nullptr) {
    --id->listener->requests;
    id->listener = nullptr;
  }
  id->retransmit = false;
  id->state = State::kRejected;
  qp_to_error(id);
  Event* e = new_event(id, RDMA_CM_EVENT_REJECTED, m.reason);
  std::memcpy(e->data, m.private_data, m.private_len);
  e->pub.param.conn.private_data = e->data;
  e->pub.param.conn.private_data_len = static_cast<uint8_t>(cm::max_private(cm::Type::kRej));
  push_event(id->chan, e);
}

void on_dreq(Device* d, uint32_t ip, Id* id, const cm::Message& m) {
  cm::Message drep{};
  drep.type = cm::Type::kDrep;
  // For a connection gone, the id the peer named: its DREQ resent after
  // our first DREP was lost still finds its answer.
  drep.local_id = id != nullptr ? id->local_id : m.remote_id;
  drep.remote_id = m.local_id;
  if (id != nullptr || may_answer_stranger()) send_message(d, ip, drep);
  if (id == nullptr) return;
  if (id->state == State::kEstablished || id->state == State::kAccepting ||
      id->state == State::kDisconnecting) {
    id->retransmit = false;
    id->state = State::kDisconnected;
    push_event(id->chan, new_event(id, RDMA_CM_EVENT_DISCONNECTED, 0));
  }
}

void handle(Device* d, const uint8_t* buf, size_t len, const ibv_wc& wc) {
  Cm& c = cm();
  ++c.received;
  cm::Message m{};
  if (len < kGrh || wc.src_qp != cm::kQpNum || !(wc.wc_flags & IBV_WC_GRH)) {
    drop("not from a QP 1", 0, m);
    return;
  }
  // The source GID of the GRH (bytes 8..23): IPv4-mapped.
  ibv_gid sgid{};
  std::memcpy(sgid.raw, buf + 8, 16);
  const uint32_t ip = ip_of_gid(sgid);
  const cm::DecodeError err = cm::decode(buf + kGrh, len - kGrh, &m);
  if (err != cm::DecodeError::kNone || m.src_ip != ip) {
    drop(err != cm::DecodeError::kNone ? cm::to_string(err) : "source address", ip, m);
    return;
  }
  trace("took", ip, m);
  if (m.type == cm::Type::kReq) {
    on_req(d, ip, m);
    return;
  }
  auto it = c.by_local_id.find(m.remote_id);
  Id* id = it == c.by_local_id.end() ? nullptr : it->second;
  if (m.type == cm::Type::kRej && m.remote_id == 0) {  // a client withdrawing its REQ
    auto p = c.by_peer.find((uint64_t{ip} << 32) | m.local_id);
    id = p == c.by_peer.end() ? nullptr : p->second;
  }
  // Only the peer of the connection, naming its own id once known.
  if (id != nullptr &&
      (id->dev != d || id->peer_ip != ip || (id->remote_id != 0 && id->remote_id != m.local_id))) {
    id = nullptr;
  }
  if (m.type == cm::Type::kDreq) {
    on_dreq(d, ip, id, m);
    return;
  }
  if (id == nullptr || id->destroying) {
    drop("no such connection", ip, m);
    return;
  }
  switch (m.type) {
    case cm::Type::kRep:
      on_rep(id, m);
      break;
    case cm::Type::kRtu:
      if (id->state == State::kAccepting) {
        id->retransmit = false;
        id->state = State::kEstablished;
        push_event(id->chan, new_event(id, RDMA_CM_EVENT_ESTABLISHED, 0));
      }
      break;
    case cm::Type::kRej:
      on_rej(id, m);
      break;
    case cm::Type::kMra:
      if (id->state == State::kConnecting) {
        id->tries = 0;  // the server is there: wait on (within the whole limit)
        id->deadline = Clock::now() + std::chrono::seconds(2);
      }
      break;
    case cm::Type::kDrep:
      if (id->state == State::kDisconnecting) {
        id->retransmit = false;
        id->state = State::kDisconnected;
        push_event(id->chan, new_event(id, RDMA_CM_EVENT_DISCONNECTED, 0));
      }
      break;
    default:
      drop("type out of place", ip, m);
      break;
  }
}

void drain(Device* d) {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  int events = 0;
  while (ibv_get_cq_event(d->ch, &cq, &ctx) == 0) ++events;
  if (events > 0) ibv_ack_cq_events(d->cq, static_cast<unsigned>(events));
  ibv_req_notify_cq(d->cq, 0);
  ibv_wc wc[16];
  for (;;) {
    const int n = ibv_poll_cq(d->cq, 16, wc);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      const int slot = static_cast<int>(wc[i].wr_id);
      if (slot >= kRecvSlots) {
        d->free_send.push_back(slot);
        continue;
      }
      if (wc[i].status == IBV_WC_SUCCESS) {
        handle(d, d->buffers.data() + size_t(slot) * kSlot, wc[i].byte_len, wc[i]);
      }
      if (wc[i].status != IBV_WC_WR_FLUSH_ERR) post_recv(d, slot);
    }
  }
}

// Retransmissions due, and what gives up.
Clock::time_point run_timers(Clock::time_point now) {
  Cm& c = cm();
  Clock::time_point next = now + std::chrono::milliseconds(200);
  for (Id* id : c.ids) {
    if (!id->retransmit || id->destroying) continue;
    if (id->deadline <= now) {
      const bool connecting = id->state == State::kConnecting;
      const bool too_long = now - id->started > std::chrono::seconds(60);
      if (++id->tries > retries() || too_long) {
        id->retransmit = false;
        if (id->state == State::kDisconnecting) {
          id->state = State::kDisconnected;
          push_event(id->chan, new_event(id, RDMA_CM_EVENT_DISCONNECTED, -ETIMEDOUT));
        } else {
          id->state = State::kRejected;
          qp_to_error(id);
          push_event(id->chan, new_event(id, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT));
        }
        (void)connecting;
        continue;
      }
      send_message(id->dev, id->peer_ip, id->last);
      id->deadline = now + backoff(id->tries);
    }
    next = std::min(next, id->deadline);
  }
  return next;
}

// Without a progress thread (BRAID_IBV_PROGRESS_THREAD=0) nothing drives a
// device while the program waits for a CM event: the service thread looks
// at QP 1 every 10 ms itself. With one (the default) it looks only when QP
// 1's channel says a message is in: a look drives the device's engine, and
// a thread that takes the engine on a core the program busy-polls, and is
// preempted holding it, stalls the program for a time slice.
bool without_progress_thread() {
  static const bool off = [] {
    const char* e = std::getenv("BRAID_IBV_PROGRESS_THREAD");
    return e != nullptr && std::strcmp(e, "0") == 0;
  }();
  return off;
}

void service_loop() {
  Cm& c = cm();
  std::unique_lock<std::mutex> lock(c.mu);
  Clock::time_point next = Clock::now();
  const int idle_ms = without_progress_thread() ? 10 : 1000;
  while (!c.stop) {
    std::vector<pollfd> fds;
    fds.push_back({c.wake_fd, POLLIN, 0});
    for (auto& d : c.devices) fds.push_back({d->ch->fd, POLLIN, 0});
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now());
    const int ms = static_cast<int>(std::clamp<int64_t>(wait.count() + 1, 0, idle_ms));
    lock.unlock();
    poll(fds.data(), fds.size(), ms);
    lock.lock();
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      (void)!read(c.wake_fd, &v, sizeof v);
    }
    for (size_t i = 0; i < c.devices.size() && i + 1 < fds.size(); ++i) {
      if ((fds[i + 1].revents & POLLIN) || without_progress_thread()) drain(c.devices[i].get());
    }
    next = run_timers(Clock::now());
  }
}

}  // namespace

Cm& cm() {
  static Cm* c = new Cm;  // never destroyed: the service thread may outlive static destructors
  return *c;
}

void close_device(Device* d) {
  for (auto& [ip, ah] : d->ahs) ibv_destroy_ah(ah);
  d->ahs.clear();
  if (d->qp1) ibv_destroy_qp(d->qp1);
  if (d->mr) ibv_dereg_mr(d->mr);
  if (d->cq) ibv_destroy_cq(d->cq);
  if (d->ch) ibv_destroy_comp_channel(d->ch);
  if (d->pd) ibv_dealloc_pd(d->pd);
  if (d->ctx) ibv_close_device(d->ctx);
  *d = Device{};
}

int open_devices() {
  Cm& c = cm();
  std::lock_guard<std::mutex> g(c.open_mu);
  if (c.opened) return c.devices.empty() ? ENODEV : 0;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  std::vector<std::unique_ptr<Device>> devs;
  for (int i = 0; list != nullptr && i < n; ++i) {
    auto d = open_device(list[i]);
    if (d) devs.push_back(std::move(d));
  }
  if (list) ibv_free_device_list(list);
  {
    std::lock_guard<std::mutex> l(c.mu);
    c.devices = std::move(devs);
    c.opened = true;
    c.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    std::random_device rd;
    c.next_local_id = rd() | 1;
    c.next_port = static_cast<uint16_t>(32768 + rd() % 28000);
    if (!c.devices.empty() && c.wake_fd >= 0) c.service = std::thread(service_loop);
  }
  // Before libibverbs' own exit handlers (registered as the devices
  // opened), which stop the ports the service thread polls.
  std::atexit(shutdown_service);
  return c.devices.empty() ? ENODEV : 0;
}

void shutdown_service() {
  Cm& c = cm();
  {
    std::lock_guard<std::mutex> l(c.mu);
    if (!c.service.joinable()) return;
    c.stop = true;
  }
  wake();
  c.service.join();
  // The devices stay open: the program may still hold objects on their
  // contexts (libibverbs' own unload releases them).
}

Device* device_for(uint32_t ip) {
  for (auto& d : cm().devices) {
    if (d->ip == ip) return d.get();
  }
  return nullptr;
}

// Ids are random (getrandom): a stranger who saw one of our messages
// cannot name another connection of ours (a forged DREQ or REJ needs the
// connection's two ids and its peer's address).
uint32_t allocate_local_id() {
  Cm& c = cm();
  for (;;) {
    uint32_t v = 0;
    if (getrandom(&v, sizeof v, 0) != sizeof v) {
      v = c.next_local_id;
      c.next_local_id = c.next_local_id * 1664525u + 1013904223u;
    }
    if (v != 0 && v != 0xffffffffu && c.by_local_id.count(v) == 0) return v;
  }
}

void push_event(Channel* ch, Event* e) {
  if (e->counted != nullptr && e->counted->destroying) {
    delete e;
    return;
  }
  ch->queue.push_back(e);
  if (!ch->signalled) {
    uint64_t one = 1;
    (void)!write(ch->pub.fd, &one, sizeof one);
    ch->signalled = true;
  }
  ch->cv.notify_all();
}

void unsignal(Channel* ch) {
  if (ch->queue.empty() && ch->signalled) {
    uint64_t v;
    (void)!read(ch->pub.fd, &v, sizeof v);
    ch->signalled = false;
  }
}

ibv_ah* ah_for(Device* d, uint32_t ip) {
  auto it = d->ahs.find(ip);
  if (it != d->ahs.end()) return it->second;
  // At most kMaxAhs peers' handles: past that, the handles of addresses no
  // id of ours talks to go (strangers' ones), and come back when needed.
  constexpr size_t kMaxAhs = 256;
  if (d->ahs.size() >= kMaxAhs) {
    for (auto a = d->ahs.begin(); a != d->ahs.end();) {
      const bool used = std::any_of(cm().ids.begin(), cm().ids.end(), [&](const Id* id) {
        return id->dev == d && id->peer_ip == a->first;
      });
      if (used) {
        ++a;
      } else {
        ibv_destroy_ah(a->second);
        a = d->ahs.erase(a);
      }
    }
  }
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = 1;
  a.grh.hop_limit = 64;
  a.grh.sgid_index = 0;
  a.grh.dgid.raw[10] = 0xff;
  a.grh.dgid.raw[11] = 0xff;
  a.grh.dgid.raw[12] = static_cast<uint8_t>(ip >> 24);
  a.grh.dgid.raw[13] = static_cast<uint8_t>(ip >> 16);
  a.grh.dgid.raw[14] = static_cast<uint8_t>(ip >> 8);
  a.grh.dgid.raw[15] = static_cast<uint8_t>(ip);
  ibv_ah* ah = ibv_create_ah(d->pd, &a);
  if (ah != nullptr) d->ahs[ip] = ah;
  return ah;
}

bool send_message(Device* d, uint32_t ip, const cm::Message& msg) {
  if (d == nullptr || d->free_send.empty()) return false;
  ibv_ah* ah = ah_for(d, ip);
  if (ah == nullptr) return false;
  const int slot = d->free_send.back();
  uint8_t* buf = d->buffers.data() + size_t(slot) * kSlot;
  cm::Message m = msg;
  m.src_ip = d->ip;
  const size_t len = cm::encode(m, buf);
  if (len == 0) return false;
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf), static_cast<uint32_t>(len), d->mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = cm::kQpNum;
  wr.wr.ud.remote_qkey = cm::kQkey;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(d->qp1, &wr, &bad) != 0) {
    trace("could not send", ip, m);
    return false;
  }
  trace("sent", ip, m);
  d->free_send.pop_back();
  ++cm().sent;
  return true;
}

cm::Message send_simple(Id* id, cm::Type t, uint16_t reason, const void* data, uint8_t len) {
  cm::Message m{};
  m.type = t;
  m.reason = reason;
  m.local_id = id->local_id;
  m.remote_id = id->remote_id;
  m.private_len = len;
  if (len) std::memcpy(m.private_data, data, len);
  send_message(id->dev, id->peer_ip, m);
  return m;
}

void send_tracked(Id* id, const cm::Message& m) {
  id->last = m;
  id->last.local_id = id->local_id;
  id->last.remote_id = id->remote_id;  // 0 for a REQ: not known yet
  id->retransmit = true;
  id->tries = 0;
  id->started = Clock::now();
  id->deadline = id->started + backoff(0);
  send_message(id->dev, id->peer_ip, id->last);
  wake();
}

void fill_route(Id* id) {
  rdma_addr& a = id->pub.route.addr;
  set_addr(reinterpret_cast<sockaddr_storage*>(&a.src_storage), id->local_ip, id->local_port);
  if (id->peer_ip != 0 || id->peer_port != 0) {
    set_addr(reinterpret_cast<sockaddr_storage*>(&a.dst_storage), id->peer_ip, id->peer_port);
  }
  if (id->dev != nullptr) {
    std::memcpy(a.addr.ibaddr.sgid.raw, id->dev->gid.raw, 16);
    ibv_gid g{};
    g.raw[10] = g.raw[11] = 0xff;
    g.raw[12] = static_cast<uint8_t>(id->peer_ip >> 24);
    g.raw[13] = static_cast<uint8_t>(id->peer_ip >> 16);
    g.raw[14] = static_cast<uint8_t>(id->peer_ip >> 8);
    g.raw[15] = static_cast<uint8_t>(id->peer_ip);
    std::memcpy(a.addr.ibaddr.dgid.raw, g.raw, 16);
    a.addr.ibaddr.pkey = 0xffff;
    ibv_sa_path_rec& p = id->path;
    p = ibv_sa_path_rec{};
    std::memcpy(p.sgid.raw, id->dev->gid.raw, 16);
    std::memcpy(p.dgid.raw, g.raw, 16);
    p.pkey = 0xffff;
    p.mtu = static_cast<uint8_t>(id->dev->mtu);
    p.hop_limit = 64;
    p.traffic_class = id->tos;
    p.packet_life_time = 14;
    p.numb_path = 1;
    p.reversible = 1;
  }
}

void qp_to_error(Id* id) {
  if (id->pub.qp == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(id->pub.qp, &a, IBV_QP_STATE);
}

// The RC QP's INIT -> INIT (access), RTR and RTS from the agreed parameters.
int connect_qp(Id* id) {
  ibv_qp_attr a{};
  int mask = 0;
  for (ibv_qp_state s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
    a = ibv_qp_attr{};
    a.qp_state = s;
    if (qp_attr_for(id, &a, &mask) != 0) return EINVAL;
    if (ibv_modify_qp(id->pub.qp, &a, mask) != 0) return errno ? errno : EINVAL;
  }
  return 0;
}

int qp_attr_for(Id* id, ibv_qp_attr* a, int* mask) {
  if (id->dev == nullptr) return EINVAL;
  switch (a->qp_state) {
    case IBV_QPS_INIT: {
      a->pkey_index = 0;
      a->port_num = 1;
      const bool known = id->state == State::kRequested || id->state == State::kAccepting ||
                         id->state == State::kEstablished || id->state == State::kResponded ||
                         id->state == State::kConnecting;
      a->qp_access_flags = !known ? 0
                                  : IBV_ACCESS_REMOTE_WRITE |
                                        (id->responder_resources != 0
                                             ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                                             : 0);
      if (id->pub.qp_type == IBV_QPT_UD) {
        a->qkey = 0x01234567;
        *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
      } else {
        *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    }
    case IBV_QPS_RTR:
      if (id->pub.qp_type == IBV_QPT_UD) {
        *mask = IBV_QP_STATE;
        return 0;
      }
      if (id->peer_qpn == 0) return EINVAL;
      a->ah_attr = ibv_ah_attr{};
      a->ah_attr.is_global = 1;
      a->ah_attr.port_num = 1;
      a->ah_attr.grh.hop_limit = 64;
      a->ah_attr.grh.traffic_class = id->tos;
      std::memcpy(a->ah_attr.grh.dgid.raw, id->pub.route.addr.addr.ibaddr.dgid.raw, 16);
      a->path_mtu = id->dev->mtu;
      a->dest_qp_num = id->peer_qpn;
      a->rq_psn = id->peer_psn;
      a->max_dest_rd_atomic = id->responder_resources;
      a->min_rnr_timer = 12;
      *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      return 0;
    case IBV_QPS_RTS:
      a->sq_psn = id->psn;
      if (id->pub.qp_type == IBV_QPT_UD) {
        *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
        return 0;
      }
      a->timeout = 14;
      a->retry_cnt = id->retry_count;
      a->rnr_retry = id->peer_rnr_retry;
      a->max_rd_atomic = id->initiator_depth;
      *mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
              IBV_QP_MAX_QP_RD_ATOMIC;
      return 0;
    default:
      return EINVAL;
  }
}

void kick() {
  wake();
}

}  // namespace braid::rdmacm

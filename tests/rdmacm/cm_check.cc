// An rdma_cm program of our own, built against the system's <rdma/rdma_cma.h>
// and linked with the system's librdmacm and libibverbs, run over Braid's
// (scripts/rdmacm-loopback.sh puts them first). It checks what rping and
// friends do not: private data both ways and the lengths events report,
// reject reasons, a request to a port nobody listens on, an address nobody
// answers from, and malformed CM messages sent straight to the server's
// QP 1, which its CM must drop and count (and go on working).
//   cm_check server ADDR PORT      accept one rejected and one good connection
//   cm_check client ADDR PORT      drive the checks against ADDR:PORT
// Both print "cm_check: PASS" and exit 0, or say what failed and exit 1.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr char kHello[] = "braid-cm-check";  // a good connection's request
constexpr char kRejectMe[] = "reject-me";
constexpr char kNo[] = "no";
constexpr char kAccepted[] = "accepted";
constexpr int kGarbage = 6;  // malformed messages the client sends

[[noreturn]] void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "cm_check: FAIL: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::exit(1);
}

sockaddr_in addr_of(const char* ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) die("bad address %s", ip);
  return a;
}

rdma_cm_event* expect(rdma_event_channel* ch, rdma_cm_event_type type) {
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0) die("rdma_get_cm_event: %s", std::strerror(errno));
  if (e->event != type) {
    die("expected %s, got %s (status %d)", rdma_event_str(type), rdma_event_str(e->event),
        e->status);
  }
  return e;
}

struct Conn {
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
};

void make_qp(rdma_cm_id* id, Conn* c) {
  c->pd = ibv_alloc_pd(id->verbs);
  c->cq = c->pd ? ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0) : nullptr;
  if (c->cq == nullptr) die("PD or CQ on the id's device");
  ibv_qp_init_attr qa{};
  qa.send_cq = c->cq;
  qa.recv_cq = c->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {8, 8, 1, 1, 0};
  if (rdma_create_qp(id, c->pd, &qa) != 0) die("rdma_create_qp: %s", std::strerror(errno));
  ibv_qp_attr a{};
  ibv_qp_init_attr ia{};
  if (ibv_query_qp(id->qp, &a, IBV_QP_STATE, &ia) != 0 || a.qp_state != IBV_QPS_INIT) {
    die("rdma_create_qp left the QP in state %d, not INIT", a.qp_state);
  }
}

void free_qp(rdma_cm_id* id, Conn* c) {
  rdma_destroy_qp(id);
  ibv_destroy_cq(c->cq);
  ibv_dealloc_pd(c->pd);
}

int server(const char* ip, int port) {
  auto dropped = reinterpret_cast<uint64_t (*)()>(dlsym(RTLD_DEFAULT, "braid_rdmacm_dropped"));
  if (dropped == nullptr) die("not Braid's librdmacm (no braid_rdmacm_dropped)");
  rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == nullptr) die("rdma_create_event_channel: %s", std::strerror(errno));
  rdma_cm_id* listen = nullptr;
  if (rdma_create_id(ch, &listen, nullptr, RDMA_PS_TCP) != 0) die("rdma_create_id");
  sockaddr_in a = addr_of(ip, port);
  if (rdma_bind_addr(listen, reinterpret_cast<sockaddr*>(&a)) != 0) {
    die("rdma_bind_addr: %s", std::strerror(errno));
  }
  if (listen->verbs == nullptr) die("bound to a device's address, but no device on the id");
  if (rdma_listen(listen, 4) != 0) die("rdma_listen: %s", std::strerror(errno));
  std::printf("cm_check: listening on %s:%d\n", ip, port);
  std::fflush(stdout);
  const uint64_t drops_before = dropped();
  bool rejected = false;
  for (;;) {
    rdma_cm_event* e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
    rdma_cm_id* id = e->id;
    if (e->listen_id != listen || id == listen) die("CONNECT_REQUEST names the wrong ids");
    const rdma_conn_param& p = e->param.conn;
    if (p.private_data_len != 56)
      die("request's private data length %u, not 56", p.private_data_len);
    const std::string data(static_cast<const char*>(p.private_data));
    if (id->verbs == nullptr || id->verbs != listen->verbs) die("request's id has no device");
    auto* peer = reinterpret_cast<sockaddr_in*>(rdma_get_peer_addr(id));
    if (peer->sin_family != AF_INET || peer->sin_addr.s_addr == 0) die("request names no peer");
    if (data == kRejectMe) {
      if (rdma_reject(id, kNo, sizeof kNo) != 0) die("rdma_reject: %s", std::strerror(errno));
      rdma_ack_cm_event(e);
      rdma_destroy_id(id);
      rejected = true;
      continue;
    }
    if (data != kHello) die("request's private data '%s'", data.c_str());
    if (p.initiator_depth != 1 || p.responder_resources != 2) {
      die("request's resources (initiator %u, responder %u) not the client's swapped (1, 2)",
          p.initiator_depth, p.responder_resources);
    }
    Conn c;
    make_qp(id, &c);
    rdma_conn_param ap{};
    ap.private_data = kAccepted;
    ap.private_data_len = sizeof kAccepted;
    ap.responder_resources = 1;
    ap.initiator_depth = 1;
    if (rdma_accept(id, &ap) != 0) die("rdma_accept: %s", std::strerror(errno));
    rdma_ack_cm_event(e);
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ESTABLISHED));
    // The client sends its malformed messages, then disconnects: they are
    // taken before the DREQ (one QP, in order).
    rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
    const uint64_t drops = dropped() - drops_before;
    std::printf("cm_check: the CM dropped %llu messages\n", static_cast<unsigned long long>(drops));
    if (drops < kGarbage)
      die("%llu messages dropped, fewer than the %d malformed ones sent",
          static_cast<unsigned long long>(drops), kGarbage);
    if (!rejected) die("no request to reject came first");
    rdma_disconnect(id);
    free_qp(id, &c);
    rdma_destroy_id(id);
    break;
  }
  rdma_destroy_id(listen);
  rdma_destroy_event_channel(ch);
  std::printf("cm_check: PASS\n");
  return 0;
}

// Resolves and connects a new id to ip:port with private data; the event
// that ends it (not acknowledged).
rdma_cm_event* connect_to(rdma_event_channel* ch, const char* ip, int port, const char* data,
                          rdma_cm_id** out, Conn* c) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) die("rdma_create_id");
  sockaddr_in a = addr_of(ip, port);
  if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&a), 2000) != 0) {
    die("rdma_resolve_addr: %s", std::strerror(errno));
  }
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
  if (rdma_resolve_route(id, 2000) != 0) die("rdma_resolve_route: %s", std::strerror(errno));
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  make_qp(id, c);
  rdma_conn_param p{};
  p.private_data = data;
  p.private_data_len = static_cast<uint8_t>(std::strlen(data) + 1);
  p.responder_resources = 1;
  p.initiator_depth = 2;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  if (rdma_connect(id, &p) != 0) die("rdma_connect: %s", std::strerror(errno));
  rdma_cm_event* e = nullptr;
  if (rdma_get_cm_event(ch, &e) != 0) die("rdma_get_cm_event: %s", std::strerror(errno));
  *out = id;
  return e;
}

// Malformed CM messages straight to the server's QP 1 from a UD QP of our
// own (any program on the network could send them).
void send_garbage(rdma_cm_id* id, const char* server_ip) {
  ibv_context* ctx = id->verbs;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_UD;
  qa.cap = {16, 1, 1, 1, 0};
  ibv_qp* qp = cq ? ibv_create_qp(pd, &qa) : nullptr;
  if (qp == nullptr) die("UD QP for the malformed messages");
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qkey = 0x80010000;  // QP 1's (a WR's Q_Key with its high bit set means the QP's)
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) != 0) {
    die("UD QP to INIT");
  }
  a.qp_state = IBV_QPS_RTR;
  ibv_modify_qp(qp, &a, IBV_QP_STATE);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) != 0) die("UD QP to RTS");
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = 1;
  aa.grh.hop_limit = 64;
  aa.grh.dgid.raw[10] = aa.grh.dgid.raw[11] = 0xff;
  in_addr sip{};
  inet_pton(AF_INET, server_ip, &sip);
  std::memcpy(aa.grh.dgid.raw + 12, &sip, 4);
  ibv_ah* ah = ibv_create_ah(pd, &aa);
  if (ah == nullptr) die("AH to the server");
  // Our own address, as a CM message states it (bytes 36..39).
  ibv_gid gid{};
  ibv_query_gid(ctx, 1, 0, &gid);
  static uint8_t msgs[kGarbage][64];
  size_t lens[kGarbage];
  auto header = [&](uint8_t* m, uint8_t type) {
    std::memset(m, 0, 64);
    m[0] = 1;
    m[1] = type;
    m[4] = 0x12;  // local id 0x12345678
    m[5] = 0x34;
    m[6] = 0x56;
    m[7] = 0x78;
    std::memcpy(m + 36, gid.raw + 12, 4);
  };
  header(msgs[0], 2);  // 0: shorter than a header
  lens[0] = 10;
  header(msgs[1], 1);  // 1: version 2
  msgs[1][0] = 2;
  lens[1] = 40;
  header(msgs[2], 9);  // 2: no such type
  lens[2] = 40;
  header(msgs[3], 1);  // 3: a REQ claiming 200 bytes of private data
  msgs[3][18] = 200;
  lens[3] = 64;
  header(msgs[4], 2);  // 4: a REP for a connection the server never made
  msgs[4][8] = 0xde;
  msgs[4][9] = 0xad;
  msgs[4][10] = 0xbe;
  msgs[4][11] = 0xef;
  lens[4] = 40;
  header(msgs[5], 1);  // 5: a REQ whose stated source is not its sender
  msgs[5][36] = 10;
  lens[5] = 40;
  ibv_mr* mr = ibv_reg_mr(pd, msgs, sizeof msgs, 0);
  if (mr == nullptr) die("MR for the malformed messages");
  for (int i = 0; i < kGarbage; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(msgs[i]), static_cast<uint32_t>(lens[i]), mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = static_cast<uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = 1;
    wr.wr.ud.remote_qkey = 0x80010000;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp, &wr, &bad) != 0) die("post malformed message %d", i);
  }
  for (int done = 0; done < kGarbage;) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(cq, 1, &wc);
    if (n < 0) die("poll_cq");
    if (n == 1) {
      if (wc.status != IBV_WC_SUCCESS)
        die("malformed message %d not sent", static_cast<int>(wc.wr_id));
      ++done;
    }
  }
  ibv_destroy_qp(qp);
  ibv_destroy_ah(ah);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
}

int client(const char* ip, int port) {
  rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == nullptr) die("rdma_create_event_channel: %s", std::strerror(errno));
  // 1. An address nobody answers from (no such host): UNREACHABLE, -ETIMEDOUT.
  {
    Conn c;
    rdma_cm_id* id = nullptr;
    rdma_cm_event* e = connect_to(ch, "198.18.0.99", port, kHello, &id, &c);
    if (e->event != RDMA_CM_EVENT_UNREACHABLE || e->status != -ETIMEDOUT) {
      die("connect to no one: %s status %d, not UNREACHABLE %d", rdma_event_str(e->event),
          e->status, -ETIMEDOUT);
    }
    rdma_ack_cm_event(e);
    free_qp(id, &c);
    rdma_destroy_id(id);
    std::printf("cm_check: no answer: UNREACHABLE, status %d\n", -ETIMEDOUT);
  }
  // 2. A port nobody listens on: REJECTED, reason 8 (invalid service ID).
  {
    Conn c;
    rdma_cm_id* id = nullptr;
    rdma_cm_event* e = connect_to(ch, ip, port + 1, kHello, &id, &c);
    if (e->event != RDMA_CM_EVENT_REJECTED || e->status != 8) {
      die("connect to a port nobody listens on: %s status %d, not REJECTED 8",
          rdma_event_str(e->event), e->status);
    }
    rdma_ack_cm_event(e);
    free_qp(id, &c);
    rdma_destroy_id(id);
    std::printf("cm_check: no listener: REJECTED, status 8\n");
  }
  // 3. Rejected by the server: REJECTED, 28 (consumer), its private data.
  //    Until the server listens, 8 (as 2.): asked again, as perftest does.
  for (int attempt = 0;; ++attempt) {
    Conn c;
    rdma_cm_id* id = nullptr;
    rdma_cm_event* e = connect_to(ch, ip, port, kRejectMe, &id, &c);
    const int status = e->status;
    const bool rejected = e->event == RDMA_CM_EVENT_REJECTED;
    if (rejected && status == 28) {
      if (e->param.conn.private_data_len != 148 ||
          std::strcmp(static_cast<const char*>(e->param.conn.private_data), kNo) != 0) {
        die("reject's private data (length %u) is not '%s'", e->param.conn.private_data_len, kNo);
      }
    }
    rdma_ack_cm_event(e);
    free_qp(id, &c);
    rdma_destroy_id(id);
    if (rejected && status == 28) break;
    if (!rejected || status != 8 || attempt == 50) {
      die("rejected connect: status %d", status);
    }
    usleep(100000);
  }
  std::printf("cm_check: rejected: REJECTED, status 28, with the server's private data\n");
  // 4. A good connection: ESTABLISHED with the server's private data.
  Conn c;
  rdma_cm_id* id = nullptr;
  rdma_cm_event* e = connect_to(ch, ip, port, kHello, &id, &c);
  if (e->event != RDMA_CM_EVENT_ESTABLISHED) {
    die("connect: %s status %d", rdma_event_str(e->event), e->status);
  }
  if (e->param.conn.private_data_len != 196 ||
      std::strcmp(static_cast<const char*>(e->param.conn.private_data), kAccepted) != 0) {
    die("accept's private data (length %u) is not '%s'", e->param.conn.private_data_len, kAccepted);
  }
  rdma_ack_cm_event(e);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  if (ibv_query_qp(id->qp, &qa, IBV_QP_STATE, &qi) != 0 || qa.qp_state != IBV_QPS_RTS) {
    die("connected QP in state %d, not RTS", qa.qp_state);
  }
  std::printf("cm_check: connected, with the server's private data; QP in RTS\n");
  // 5. Malformed messages to the server's QP 1, then the disconnect.
  send_garbage(id, ip);
  if (rdma_disconnect(id) != 0) die("rdma_disconnect: %s", std::strerror(errno));
  rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED));
  free_qp(id, &c);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  std::printf("cm_check: PASS\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: cm_check server|client ADDR PORT\n");
    return 2;
  }
  const int port = std::atoi(argv[3]);
  if (std::strcmp(argv[1], "server") == 0) return server(argv[2], port);
  if (std::strcmp(argv[1], "client") == 0) return client(argv[2], port);
  std::fprintf(stderr, "usage: cm_check server|client ADDR PORT\n");
  return 2;
}

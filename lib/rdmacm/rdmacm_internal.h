// The objects behind Braid's librdmacm.so.1: rdma-core's structs (what
// programs read: rdma_cm_id, rdma_cm_event, rdma_event_channel) first in
// Braid's, which hold the connection's state. One lock (Cm::mu) guards all
// of it: connection management is the slow path.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rdmacm/cm_message.h"

namespace braid::rdmacm {

using Clock = std::chrono::steady_clock;

struct Id;

struct Event {
  rdma_cm_event pub;       // first: what rdma_get_cm_event hands out
  Id* counted = nullptr;   // the id whose acknowledgements it counts against
  uint8_t data[256] = {};  // param.conn.private_data points here
};

struct Channel {
  rdma_event_channel pub;  // {fd}: readable while an event waits
  std::deque<Event*> queue;
  std::condition_variable cv;  // where a thread waits for good on a destroyed channel
  bool sync = false;           // an id's own (created with a NULL channel)
  bool signalled = false;      // the fd holds a count (queue not empty)
  int waiters = 0;             // threads blocked in rdma_get_cm_event on it
  bool dead = false;           // destroyed while a thread waited: kept for it
};

enum class State {
  kIdle,           // created
  kBound,          // rdma_bind_addr
  kAddrResolved,   // rdma_resolve_addr
  kRouteResolved,  // rdma_resolve_route
  kListening,      // rdma_listen
  kConnecting,     // REQ sent, waiting for REP
  kResponded,      // client: REP received, no QP (CONNECT_RESPONSE), waiting for rdma_establish
  kRequested,      // server: REQ received, waiting for rdma_accept / rdma_reject
  kAccepting,      // server: REP sent, waiting for RTU
  kEstablished,
  kDisconnecting,  // DREQ sent, waiting for DREP
  kDisconnected,   // DISCONNECTED raised
  kRejected,       // rejected (either way) or failed
};

struct Device {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;  // the library's: QP 1's, and ids' without one of their own
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp1 = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buffers;  // receive slots then send slots
  std::vector<int> free_send;    // send slots not in flight
  uint32_t ip = 0;               // host order
  ibv_gid gid{};
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t max_rd_atomic = 0, max_init_rd_atomic = 0;
  std::unordered_map<uint32_t, ibv_ah*> ahs;  // peer IPv4 -> AH to its QP 1
};

struct Id {
  rdma_cm_id pub{};  // first: programs hold &pub
  State state = State::kIdle;
  Device* dev = nullptr;
  Channel* chan = nullptr;
  bool own_channel = false;            // a sync id's private channel
  uint32_t local_id = 0;               // ours on the wire (never 0)
  uint32_t remote_id = 0;              // the peer's
  uint32_t local_ip = 0, peer_ip = 0;  // host order
  uint16_t local_port = 0, peer_port = 0;
  bool holds_port = false;  // in Cm::ports under (ps, local_port)
  int backlog = 0;
  int requests = 0;        // listener: its requests not yet accepted or rejected
  Id* listener = nullptr;  // a request's: the listener it came through (until accepted)
  // Connection parameters, our view: responder resources we give, initiator
  // depth we use.
  uint32_t psn = 0, peer_qpn = 0, peer_psn = 0;
  uint8_t responder_resources = 0, initiator_depth = 0;
  uint8_t retry_count = 7, rnr_retry_count = 7, peer_rnr_retry = 7;
  uint8_t flow_control = 0, srq = 0;
  uint8_t tos = 0;
  // The message we may have to send again, and when.
  cm::Message last{};
  bool retransmit = false;
  int tries = 0;
  Clock::time_point deadline{};
  Clock::time_point started{};
  // Events handed out and not acknowledged (rdma_destroy_id waits for them).
  int events_out = 0;
  std::condition_variable acked;
  // What rdma_create_qp made (and rdma_destroy_qp destroys).
  bool own_send_cq = false, own_recv_cq = false;
  // rdma_create_ep on a passive id: the QP attributes rdma_get_request uses.
  std::unique_ptr<ibv_qp_init_attr> ep_attr;
  ibv_sa_path_rec path{};
  bool destroying = false;
};

struct Cm {
  std::mutex mu;
  std::mutex open_mu;  // opening devices (waits for links) outside mu
  bool opened = false;
  std::vector<std::unique_ptr<Device>> devices;
  std::list<Id*> ids;
  std::unordered_map<uint32_t, Id*> by_local_id;
  std::unordered_map<uint64_t, Id*> by_peer;  // (peer ip << 32 | peer's id) -> id
  std::unordered_map<uint32_t, Id*> ports;    // (ps << 16 | port) -> holder
  uint32_t next_local_id = 1;
  uint16_t next_port = 0;
  std::thread service;
  int wake_fd = -1;
  bool stop = false;
  // Messages dropped: malformed, from a QP other than a peer's QP 1, naming
  // no connection, or arriving in a state that takes none of their kind.
  uint64_t drops = 0;
  uint64_t sent = 0, received = 0;
};

Cm& cm();

}  // namespace braid::rdmacm

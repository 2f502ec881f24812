// The NCCL plugin's connection set-up: listen, connect and accept exchange
// the QPs' descriptions over a TCP connection (Braid's out-of-band
// exchange, braid/connect.h, in its non-blocking steps: NCCL calls again
// until a step is done). The connection stays open, so that a peer that
// dies is noticed (its end closes) by a request that waits for it.
#include <cerrno>
#include <cstring>

#include "braid/connect.h"
#include "nccl/plugin_internal.h"

namespace braid::nccl {

// The progress of one connect or accept, between NCCL's calls.
struct Pending {
  Comm* comm = nullptr;
  int stage = 0;
  size_t off = 0;
  PeerInfo mine{}, theirs{};
  uint8_t ready = 1;
};

namespace {

struct Listen {
  int fd = -1;
  Pending* pending = nullptr;
};

void drop_pending(Pending* p) {
  if (p == nullptr) return;
  destroy_comm(p->comm);
  delete p;
}

}  // namespace

ncclResult_t braid_listen(int dev, void* opaque_handle, void** listen_comm) {
  *listen_comm = nullptr;
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  auto* l = new Listen;
  uint32_t ip = 0;
  uint16_t port = 0;
  if (const int err = braid_exchange_listen_nb(g_dev.oob_ip, 0, &l->fd, &ip, &port)) {
    WARN("listen: cannot listen on TCP: %s", std::strerror(err));
    delete l;
    return ncclSystemError;
  }
  Handle h{};
  h.magic = kHandleMagic;
  h.ip = ip;
  h.port = port;
  std::memset(opaque_handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  std::memcpy(opaque_handle, &h, sizeof h);
  *listen_comm = l;
  return ncclSuccess;
}

ncclResult_t connect_common(int dev, void* opaque_handle, void** send_comm) {
  *send_comm = nullptr;
  if (const ncclResult_t r = check_dev(dev); r != ncclSuccess) return r;
  Handle h;
  std::memcpy(&h, opaque_handle, sizeof h);
  if (h.magic != kHandleMagic) {
    WARN("connect: the handle is not one of this plugin's");
    return ncclInvalidArgument;
  }
  Pending* p = h.pending;
  auto save = [&] {
    h.pending = p;
    std::memcpy(opaque_handle, &h, sizeof h);
  };
  auto fail = [&](ncclResult_t code, const char* why) {
    if (why != nullptr) WARN("connect: %s", why);
    drop_pending(p);
    p = nullptr;
    save();
    return code;
  };
  if (p == nullptr) {
    p = new Pending;
    p->comm = create_comm(Kind::kSend);
    if (p->comm == nullptr) return fail(ncclSystemError, nullptr);
    if (const int err = braid_exchange_connect_start(h.ip, h.port, &p->comm->fd)) {
      return fail(ncclSystemError, std::strerror(err));
    }
    p->mine = info_of(p->comm);
    p->stage = 1;
  }
  Comm* c = p->comm;
  if (p->stage == 1) {  // TCP connected?
    const int err = braid_exchange_connect_done(c->fd);
    if (err == EAGAIN) return save(), ncclSuccess;
    if (err != 0) return fail(ncclSystemError, std::strerror(err));
    p->stage = 2;
    p->off = 0;
  }
  if (p->stage == 2) {  // our QP's description out
    const int r = braid_exchange_send_some(c->fd, &p->mine, sizeof p->mine, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the listener closed the connection");
    if (r == 0) return save(), ncclSuccess;
    p->stage = 3;
    p->off = 0;
  }
  if (p->stage == 3) {  // theirs in: connect our QP
    const int r = braid_exchange_recv_some(c->fd, &p->theirs, sizeof p->theirs, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the listener closed the connection");
    if (r == 0) return save(), ncclSuccess;
    if (const ncclResult_t e = connect_qp(c, p->theirs); e != ncclSuccess) return fail(e, nullptr);
    p->stage = 4;
    p->off = 0;
  }
  if (p->stage == 4) {  // "ready": our QP takes the receiver's descriptors
    const int r = braid_exchange_send_some(c->fd, &p->ready, 1, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the listener closed the connection");
    if (r == 0) return save(), ncclSuccess;
  }
  *send_comm = c;
  delete p;
  p = nullptr;
  save();
  return ncclSuccess;
}

ncclResult_t braid_connect_v8(int dev, void* handle, void** send_comm,
                              ncclNetDeviceHandle_v8_t** /*send_dev_comm: no offload*/) {
  return connect_common(dev, handle, send_comm);
}
ncclResult_t braid_connect_v10(int dev, ncclNetCommConfig_v10_t* /*config*/, void* handle,
                               void** send_comm, ncclNetDeviceHandle_v10_t** /*send_dev_comm*/) {
  return connect_common(dev, handle, send_comm);
}

ncclResult_t braid_accept(void* listen_comm, void** recv_comm,
                          ncclNetDeviceHandle_v8_t** /*recv_dev_comm: no offload*/) {
  *recv_comm = nullptr;
  auto* l = static_cast<Listen*>(listen_comm);
  Pending*& p = l->pending;
  auto fail = [&](ncclResult_t code, const char* why) {
    if (why != nullptr) WARN("accept: %s", why);
    drop_pending(p);
    p = nullptr;
    return code;
  };
  if (p == nullptr) {
    int fd = -1;
    if (const int err = braid_exchange_accept_nb(l->fd, &fd)) {
      if (err == EAGAIN) return ncclSuccess;  // nobody yet
      WARN("accept: %s", std::strerror(err));
      return ncclSystemError;
    }
    p = new Pending;
    p->comm = create_comm(Kind::kRecv);
    if (p->comm == nullptr) {
      braid_exchange_close(fd);
      return fail(ncclSystemError, nullptr);
    }
    p->comm->fd = fd;
    p->mine = info_of(p->comm);
    p->stage = 1;
  }
  Comm* c = p->comm;
  if (p->stage == 1) {  // the sender's QP in: connect ours
    const int r = braid_exchange_recv_some(c->fd, &p->theirs, sizeof p->theirs, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the connecting peer closed the connection");
    if (r == 0) return ncclSuccess;
    if (const ncclResult_t e = connect_qp(c, p->theirs); e != ncclSuccess) return fail(e, nullptr);
    p->stage = 2;
    p->off = 0;
  }
  if (p->stage == 2) {
    const int r = braid_exchange_send_some(c->fd, &p->mine, sizeof p->mine, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the connecting peer closed the connection");
    if (r == 0) return ncclSuccess;
    p->stage = 3;
    p->off = 0;
  }
  if (p->stage == 3) {  // its QP is ready for our descriptors
    uint8_t ready = 0;
    const int r = braid_exchange_recv_some(c->fd, &ready, 1, &p->off);
    if (r < 0) return fail(ncclRemoteError, "the connecting peer closed the connection");
    if (r == 0) return ncclSuccess;
  }
  *recv_comm = c;
  delete p;
  p = nullptr;
  return ncclSuccess;
}

ncclResult_t braid_close_listen(void* listen_comm) {
  auto* l = static_cast<Listen*>(listen_comm);
  if (l == nullptr) return ncclSuccess;
  drop_pending(l->pending);
  if (l->fd >= 0) braid_exchange_close(l->fd);
  delete l;
  return ncclSuccess;
}

}  // namespace braid::nccl

// rsockets (<rdma/rsocket.h>): not in Braid. rpoll and rselect on ordinary
// descriptors are poll() and select() (what rping and ucmatose link them
// for); every call on an rsocket fails with ENOSYS, as no rsocket can be
// made.
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/select.h>

#include <cerrno>

#define BRAID_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
int nosys() {
  errno = ENOSYS;
  return -1;
}
}  // namespace

BRAID_EXPORT int rpoll(struct pollfd* fds, nfds_t nfds, int timeout) {
  return poll(fds, nfds, timeout);
}
BRAID_EXPORT int rselect(int nfds, fd_set* r, fd_set* w, fd_set* x, struct timeval* t) {
  return select(nfds, r, w, x, t);
}
BRAID_EXPORT int rsocket(int, int, int) {
  return nosys();
}
BRAID_EXPORT int rbind(int, const struct sockaddr*, socklen_t) {
  return nosys();
}
BRAID_EXPORT int rlisten(int, int) {
  return nosys();
}
BRAID_EXPORT int raccept(int, struct sockaddr*, socklen_t*) {
  return nosys();
}
BRAID_EXPORT int rconnect(int, const struct sockaddr*, socklen_t) {
  return nosys();
}
BRAID_EXPORT int rshutdown(int, int) {
  return nosys();
}
BRAID_EXPORT int rclose(int) {
  return nosys();
}
BRAID_EXPORT ssize_t rrecv(int, void*, size_t, int) {
  return nosys();
}
BRAID_EXPORT ssize_t rrecvfrom(int, void*, size_t, int, struct sockaddr*, socklen_t*) {
  return nosys();
}
BRAID_EXPORT ssize_t rrecvmsg(int, struct msghdr*, int) {
  return nosys();
}
BRAID_EXPORT ssize_t rsend(int, const void*, size_t, int) {
  return nosys();
}
BRAID_EXPORT ssize_t rsendto(int, const void*, size_t, int, const struct sockaddr*, socklen_t) {
  return nosys();
}
BRAID_EXPORT ssize_t rsendmsg(int, const struct msghdr*, int) {
  return nosys();
}
BRAID_EXPORT ssize_t rread(int, void*, size_t) {
  return nosys();
}
BRAID_EXPORT ssize_t rreadv(int, const struct iovec*, int) {
  return nosys();
}
BRAID_EXPORT ssize_t rwrite(int, const void*, size_t) {
  return nosys();
}
BRAID_EXPORT ssize_t rwritev(int, const struct iovec*, int) {
  return nosys();
}
BRAID_EXPORT int rgetpeername(int, struct sockaddr*, socklen_t*) {
  return nosys();
}
BRAID_EXPORT int rgetsockname(int, struct sockaddr*, socklen_t*) {
  return nosys();
}
BRAID_EXPORT int rsetsockopt(int, int, int, const void*, socklen_t) {
  return nosys();
}
BRAID_EXPORT int rgetsockopt(int, int, int, void*, socklen_t*) {
  return nosys();
}
BRAID_EXPORT int rfcntl(int, int, ...) {
  return nosys();
}
BRAID_EXPORT off_t riomap(int, void*, size_t, int, int, off_t) {
  return nosys();
}
BRAID_EXPORT int riounmap(int, void*, size_t) {
  return nosys();
}
BRAID_EXPORT size_t riowrite(int, const void*, size_t, off_t, int) {
  errno = ENOSYS;
  return 0;
}

// Out-of-band QP information exchange over TCP (perftest's format and order).
// Sockets are non-blocking; every wait goes through poll() against one
// deadline per call, so no call outlives its timeout.
#include "braid/connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// What we remember about an exchange connection.
struct Connection {
  bool is_client = false;  // the client writes first, the server reads first
  int timeout_ms = -1;
  braid_exchange_idle_fn idle = nullptr;
  void* idle_arg = nullptr;
};

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::unordered_map<int, Connection>& registry() {
  static std::unordered_map<int, Connection> conns;
  return conns;
}

int register_connection(int fd, const Connection& c) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  try {
    registry()[fd] = c;
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  return 0;
}

bool find_connection(int fd, Connection* out) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(fd);
  if (it == registry().end()) return false;
  *out = it->second;
  return true;
}

class Deadline {
 public:
  explicit Deadline(int timeout_ms)
      : unlimited_(timeout_ms < 0),
        end_(Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0))) {}

  bool expired() const { return !unlimited_ && Clock::now() >= end_; }

  // Milliseconds for poll(): -1 when unlimited, rounded up so that a wait
  // never returns just before the deadline and spins.
  int poll_ms() const {
    if (unlimited_) return -1;
    const auto left = end_ - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    return static_cast<int>(std::min<int64_t>(ms, 60'000));
  }

 private:
  bool unlimited_;
  Clock::time_point end_;
};

// The idle callback (a device's engine, typically) runs for a while
// between two looks at the socket: a poll() system call costs as much as a
// whole burst of packets, and the peer's message can wait a few
// microseconds.
void run_idle(const Connection& c) {
  constexpr auto kSlice = std::chrono::microseconds(50);
  const Clock::time_point until = Clock::now() + kSlice;
  do {
    for (int i = 0; i < 16; ++i) c.idle(c.idle_arg);
  } while (Clock::now() < until);
}

// Waits until fd is ready for `events` (errors and hang-ups count as ready:
// the following send/recv reports them). 0, ETIMEDOUT or an errno value.
int wait_ready(int fd, short events, const Deadline& deadline, const Connection& c) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, c.idle ? 0 : deadline.poll_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n > 0) return 0;
    if (deadline.expired()) return ETIMEDOUT;
    if (c.idle) run_idle(c);
  }
}

int send_all(int fd, const void* data, size_t len, const Deadline& deadline, const Connection& c) {
  const auto* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (const int err = wait_ready(fd, POLLOUT, deadline, c)) return err;
      continue;
    }
    return (n < 0 && errno != EPIPE) ? errno : ECONNRESET;
  }
  return 0;
}

int recv_all(int fd, void* data, size_t len, const Deadline& deadline, const Connection& c) {
  auto* p = static_cast<char*>(data);
  while (len > 0) {
    const ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return ECONNRESET;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (const int err = wait_ready(fd, POLLIN, deadline, c)) return err;
      continue;
    }
    return errno;
  }
  return 0;
}

// One message each way: the client writes first, the server reads first
// (perftest's ctx_hand_shake), so large messages cannot deadlock.
int swap_messages(int fd, const Connection& c, const Deadline& deadline, const void* mine,
                  void* theirs, size_t len) {
  if (c.is_client) {
    if (const int err = send_all(fd, mine, len, deadline, c)) return err;
    return recv_all(fd, theirs, len, deadline, c);
  }
  if (const int err = recv_all(fd, theirs, len, deadline, c)) return err;
  return send_all(fd, mine, len, deadline, c);
}

// Low latency for the small sync messages, and keepalive so that an
// unbounded wait still ends if the peer host vanishes (~11 s).
void configure_socket(int fd) {
  const int one = 1, idle_s = 5, interval_s = 2, probes = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
}

// Errors after which the client tries again: nobody listens yet, or the
// network path is not up yet.
bool connect_retriable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ENETUNREACH || err == EHOSTUNREACH ||
         err == ECONNRESET || err == EAGAIN;
}

// One non-blocking connect attempt to one address. 0 and *fd_out, or errno.
int try_connect(const addrinfo* ai, const Deadline& deadline, int* fd_out) {
  const int fd =
      socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return errno;
  int err = 0;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      err = wait_ready(fd, POLLOUT, deadline, Connection{});
      if (err == 0) {
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
  }
  if (err != 0) {
    close(fd);
    return err;
  }
  *fd_out = fd;
  return 0;
}

constexpr char kBarrierToken[16] = "braid-barrier-1";

bool hex_field(const char*& p, int width, uint64_t* value) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) {
    const char ch = p[i];
    int d;
    if (ch >= '0' && ch <= '9') {
      d = ch - '0';
    } else if (ch >= 'a' && ch <= 'f') {
      d = ch - 'a' + 10;
    } else if (ch >= 'A' && ch <= 'F') {
      d = ch - 'A' + 10;
    } else {
      return false;
    }
    v = v * 16 + static_cast<uint64_t>(d);
  }
  if (p[width] != ':') return false;
  p += width + 1;
  *value = v;
  return true;
}

}  // namespace

extern "C" {

int braid_conn_info_encode(const struct braid_conn_info* info, char msg[BRAID_CONN_INFO_MSG_SIZE]) {
  if (!info || !msg) return EINVAL;
  if (info->lid > 0xffff || info->out_reads > 0xffff || info->qpn > 0xffffff ||
      info->psn > 0xffffff) {
    return EINVAL;
  }
  const uint8_t* g = info->gid.raw;
  char buf[BRAID_CONN_INFO_MSG_SIZE + 16];
  const int n = std::snprintf(
      buf, sizeof buf,
      "%04x:%04x:%06x:%06x:%08x:%016llx:"
      "%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%02x:%08x:",
      info->lid, info->out_reads, info->qpn, info->psn, info->rkey,
      static_cast<unsigned long long>(info->vaddr), g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7],
      g[8], g[9], g[10], g[11], g[12], g[13], g[14], g[15], info->srqn);
  if (n != BRAID_CONN_INFO_MSG_SIZE - 1) return EINVAL;
  std::memcpy(msg, buf, BRAID_CONN_INFO_MSG_SIZE);  // the NUL included, as perftest sends it
  return 0;
}

int braid_conn_info_decode(const char msg[BRAID_CONN_INFO_MSG_SIZE], struct braid_conn_info* info) {
  if (!msg || !info) return EINVAL;
  // Every field has a fixed width, so the parser never looks past byte 107.
  const char* p = msg;
  uint64_t lid = 0, out_reads = 0, qpn = 0, psn = 0, rkey = 0, vaddr = 0, srqn = 0, byte = 0;
  braid_conn_info out{};
  if (!hex_field(p, 4, &lid) || !hex_field(p, 4, &out_reads) || !hex_field(p, 6, &qpn) ||
      !hex_field(p, 6, &psn) || !hex_field(p, 8, &rkey) || !hex_field(p, 16, &vaddr)) {
    return EPROTO;
  }
  for (uint8_t& g : out.gid.raw) {
    if (!hex_field(p, 2, &byte)) return EPROTO;
    g = static_cast<uint8_t>(byte);
  }
  if (!hex_field(p, 8, &srqn)) return EPROTO;
  if (p != msg + BRAID_CONN_INFO_MSG_SIZE - 1 || *p != '\0') return EPROTO;
  out.lid = static_cast<uint32_t>(lid);
  out.out_reads = static_cast<uint32_t>(out_reads);
  out.qpn = static_cast<uint32_t>(qpn);
  out.psn = static_cast<uint32_t>(psn);
  out.rkey = static_cast<uint32_t>(rkey);
  out.vaddr = vaddr;
  out.srqn = static_cast<uint32_t>(srqn);
  *info = out;
  return 0;
}

int braid_exchange_listen(uint16_t port, int timeout_ms, int* fd_out) {
  return braid_exchange_listen_addr(nullptr, port, timeout_ms, fd_out);
}

int braid_exchange_listen_addr(const char* bind_addr, uint16_t port, int timeout_ms, int* fd_out) {
  if (!fd_out) return EINVAL;
  sockaddr_storage ss{};
  socklen_t ss_len;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (!bind_addr || inet_pton(AF_INET, bind_addr, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    if (!bind_addr) v4->sin_addr.s_addr = htonl(INADDR_ANY);
    ss_len = sizeof *v4;
  } else if (inet_pton(AF_INET6, bind_addr, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    ss_len = sizeof *v6;
  } else {
    return EINVAL;
  }

  const int lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0) return errno;
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&ss), ss_len) != 0 || listen(lfd, 1) != 0) {
    const int err = errno;
    close(lfd);
    return err;
  }

  const Deadline deadline(timeout_ms);
  int fd = -1;
  for (;;) {
    fd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) break;
    const int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) {
      close(lfd);
      return err;
    }
    if (const int werr = wait_ready(lfd, POLLIN, deadline, Connection{})) {
      close(lfd);
      return werr;
    }
  }
  close(lfd);
  configure_socket(fd);
  if (const int err = register_connection(fd, Connection{false, timeout_ms, nullptr, nullptr})) {
    close(fd);
    return err;
  }
  *fd_out = fd;
  return 0;
}

int braid_exchange_connect(const char* host, uint16_t port, int timeout_ms, int* fd_out) {
  if (!host || !fd_out) return EINVAL;
  const Deadline deadline(timeout_ms);
  char service[8];
  std::snprintf(service, sizeof service, "%u", static_cast<unsigned>(port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;

  auto backoff = std::chrono::milliseconds(5);
  for (;;) {
    addrinfo* res = nullptr;
    const int gai = getaddrinfo(host, service, &hints, &res);
    int err;
    if (gai == 0) {
      err = EHOSTUNREACH;
      for (const addrinfo* ai = res; ai; ai = ai->ai_next) {
        int fd = -1;
        err = try_connect(ai, deadline, &fd);
        if (err == 0) {
          freeaddrinfo(res);
          configure_socket(fd);
          if (const int rerr =
                  register_connection(fd, Connection{true, timeout_ms, nullptr, nullptr})) {
            close(fd);
            return rerr;
          }
          *fd_out = fd;
          return 0;
        }
      }
      freeaddrinfo(res);
    } else if (gai == EAI_AGAIN) {
      err = EAGAIN;
    } else if (gai == EAI_SYSTEM) {
      err = errno;
    } else if (gai == EAI_MEMORY) {
      return ENOMEM;
    } else {
      return EHOSTUNREACH;  // the name does not resolve: retrying will not help
    }
    if (!connect_retriable(err)) return err;
    if (deadline.expired()) return ETIMEDOUT;
    // The server is not listening yet: try again shortly.
    const int left = deadline.poll_ms();
    auto pause = backoff;
    if (left >= 0) pause = std::min(pause, std::chrono::milliseconds(left));
    std::this_thread::sleep_for(pause);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

int braid_exchange_set_timeout(int fd, int timeout_ms) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(fd);
  if (it == registry().end()) return EBADF;
  it->second.timeout_ms = timeout_ms;
  return 0;
}

int braid_exchange_set_idle(int fd, braid_exchange_idle_fn idle, void* arg) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(fd);
  if (it == registry().end()) return EBADF;
  it->second.idle = idle;
  it->second.idle_arg = arg;
  return 0;
}

int braid_exchange_info(int fd, const struct braid_conn_info* mine, struct braid_conn_info* theirs,
                        int count) {
  if (count < 0 || (count > 0 && (!mine || !theirs))) return EINVAL;
  Connection c;
  if (!find_connection(fd, &c)) return EBADF;
  const Deadline deadline(c.timeout_ms);
  // Validate every entry before sending any, so that a bad entry does not
  // leave the peer half-way through the exchange.
  std::vector<char> out;
  try {
    out.resize(static_cast<size_t>(count) * BRAID_CONN_INFO_MSG_SIZE);
  } catch (const std::bad_alloc&) {
    return ENOMEM;
  }
  for (int i = 0; i < count; ++i) {
    if (const int err =
            braid_conn_info_encode(&mine[i], out.data() + size_t(i) * BRAID_CONN_INFO_MSG_SIZE)) {
      return err;
    }
  }
  for (int i = 0; i < count; ++i) {
    char in[BRAID_CONN_INFO_MSG_SIZE];
    if (const int err = swap_messages(
            fd, c, deadline, out.data() + size_t(i) * BRAID_CONN_INFO_MSG_SIZE, in, sizeof in)) {
      return err;
    }
    if (const int err = braid_conn_info_decode(in, &theirs[i])) return err;
  }
  return 0;
}

int braid_exchange_data(int fd, const void* mine, void* theirs, size_t len) {
  if (len > 0 && (!mine || !theirs)) return EINVAL;
  Connection c;
  if (!find_connection(fd, &c)) return EBADF;
  return swap_messages(fd, c, Deadline(c.timeout_ms), mine, theirs, len);
}

int braid_exchange_barrier(int fd) {
  Connection c;
  if (!find_connection(fd, &c)) return EBADF;
  char in[sizeof kBarrierToken];
  if (const int err =
          swap_messages(fd, c, Deadline(c.timeout_ms), kBarrierToken, in, sizeof kBarrierToken)) {
    return err;
  }
  return std::memcmp(in, kBarrierToken, sizeof in) == 0 ? 0 : EPROTO;
}

void braid_exchange_close(int fd) {
  if (fd < 0) return;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(fd);
  }
  close(fd);
}

int braid_exchange_listen_nb(uint32_t bind_ip, uint16_t port, int* fd_out, uint32_t* ip_out,
                             uint16_t* port_out) {
  if (!fd_out) return EINVAL;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = bind_ip;
  a.sin_port = port;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int err = errno;
    close(fd);
    return err;
  }
  if (ip_out) *ip_out = a.sin_addr.s_addr;
  if (port_out) *port_out = a.sin_port;
  *fd_out = fd;
  return 0;
}

int braid_exchange_accept_nb(int listen_fd, int* fd_out) {
  if (!fd_out) return EINVAL;
  for (;;) {
    const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      configure_socket(fd);
      *fd_out = fd;
      return 0;
    }
    const int err = errno;
    if (err == EINTR || err == ECONNABORTED) continue;  // that one went: look again
    return err == EWOULDBLOCK ? EAGAIN : err;
  }
}

int braid_exchange_connect_start(uint32_t ip, uint16_t port, int* fd_out) {
  if (!fd_out) return EINVAL;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  configure_socket(fd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = ip;
  a.sin_port = port;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    const int err = errno;
    close(fd);
    return err;
  }
  *fd_out = fd;
  return 0;
}

int braid_exchange_connect_done(int fd) {
  pollfd pfd{fd, POLLOUT, 0};
  const int n = poll(&pfd, 1, 0);
  if (n < 0) return errno == EINTR ? EAGAIN : errno;
  if (n == 0) return EAGAIN;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

int braid_exchange_send_some(int fd, const void* buf, size_t len, size_t* off) {
  while (*off < len) {
    const ssize_t n = send(fd, static_cast<const char*>(buf) + *off, len - *off, MSG_NOSIGNAL);
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    *off += static_cast<size_t>(n);
  }
  return 1;
}

int braid_exchange_recv_some(int fd, void* buf, size_t len, size_t* off) {
  while (*off < len) {
    const ssize_t n = recv(fd, static_cast<char*>(buf) + *off, len - *off, 0);
    if (n == 0) return -1;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
    *off += static_cast<size_t>(n);
  }
  return 1;
}

int braid_exchange_peer_closed(int fd) {
  char b;
  const ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ? 1 : 0;
}

}  // extern "C"

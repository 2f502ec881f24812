/*
 * Out-of-band exchange of QP information over TCP, as perftest does it, so
 * Braid's tools and examples need not each reimplement it.
 *
 * One side listens and accepts one peer (the "server"), the other connects
 * (the "client"). Each QP is described by one fixed-length ASCII message in
 * perftest's RoCE format
 *
 *   lid:out_reads:qpn:psn:rkey:vaddr:g0:g1:...:g15:srqn:
 *
 * printed as %04x:%04x:%06x:%06x:%08x:%016llx:, the 16 GID bytes as %02x:
 * each, then %08x: and a terminating NUL: BRAID_CONN_INFO_MSG_SIZE bytes. As
 * in perftest the client writes first and the server reads first, message by
 * message.
 *
 * Errors: every function returns 0 or a positive errno value:
 *   ETIMEDOUT    the peer did not connect / answer within the timeout
 *   ECONNRESET   the peer closed the connection
 *   EPROTO       the peer sent a malformed message (nothing is overflowed)
 *   EINVAL       bad arguments (e.g. a QPN that does not fit 24 bits)
 *   EHOSTUNREACH the host name does not resolve
 *   others       from the socket calls (EADDRINUSE, ...)
 *
 * Timeouts (milliseconds): < 0 waits without limit, 0 does not wait, > 0
 * bounds the call. The timeout given to braid_exchange_listen/connect also
 * bounds every later exchange on that connection (each call as a whole);
 * braid_exchange_set_timeout changes it. The socket has TCP keepalive on, so
 * even an unbounded wait ends if the peer's host disappears, and it ends at
 * once if the peer process exits.
 *
 * Run-to-completion devices: a Braid device without a progress thread moves
 * packets only inside verbs calls. A process blocked here would stop
 * acknowledging its peer's traffic; braid_exchange_set_idle installs a
 * function (typically calling braid_progress) that is called repeatedly
 * while a call waits for the peer.
 *
 * The functions are thread-safe for distinct connections; one connection
 * must be used by one thread at a time.
 */
#ifndef BRAID_CONNECT_H
#define BRAID_CONNECT_H

#include <stddef.h>
#include <stdint.h>

#include "braid/verbs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* perftest's default TCP port. */
#define BRAID_EXCHANGE_DEFAULT_PORT 18515

/* Length of one QP message, terminating NUL included (perftest's
 * KEY_MSG_SIZE_GID). */
#define BRAID_CONN_INFO_MSG_SIZE 108

struct braid_conn_info {
  uint32_t qpn; /* 24 bits */
  uint32_t psn; /* 24 bits */
  uint32_t rkey;
  uint64_t vaddr;
  union braid_gid gid;
  uint32_t lid;       /* 16 bits; 0 on Ethernet */
  uint32_t out_reads; /* 16 bits */
  uint32_t srqn;
};

/* Server: binds 0.0.0.0:port, accepts one client and closes the listening
 * socket. SO_REUSEADDR is set, so a server can restart at once. */
int braid_exchange_listen(uint16_t port, int timeout_ms, int* fd_out);
/* The same, bound to bind_addr (an IPv4 or IPv6 literal, NULL: any IPv4). */
int braid_exchange_listen_addr(const char* bind_addr, uint16_t port, int timeout_ms, int* fd_out);

/* Client: connects to host:port (a name or an address), retrying while
 * nobody listens yet, until the timeout passes. */
int braid_exchange_connect(const char* host, uint16_t port, int timeout_ms, int* fd_out);

/* Changes the timeout that bounds each later exchange on fd. */
int braid_exchange_set_timeout(int fd, int timeout_ms);

/* While an exchange on fd waits for the peer, idle(arg) is called in a loop
 * (busy polling). NULL restores blocking waits. */
typedef void (*braid_exchange_idle_fn)(void* arg);
int braid_exchange_set_idle(int fd, braid_exchange_idle_fn idle, void* arg);

/* Sends count messages (one per QP) and receives the peer's count. */
int braid_exchange_info(int fd, const struct braid_conn_info* mine, struct braid_conn_info* theirs,
                        int count);

/* Sends len bytes and receives the peer's len bytes (e.g. a report). Both
 * sides must pass the same len. */
int braid_exchange_data(int fd, const void* mine, void* theirs, size_t len);

/* A sync point, like perftest's ctx_hand_shake: returns once the peer has
 * reached its own braid_exchange_barrier. */
int braid_exchange_barrier(int fd);

/* Closes the connection and forgets its settings. */
void braid_exchange_close(int fd);

/* Non-blocking use, for a caller that must return between the steps of a
 * set-up and call again (NCCL's connect and accept). Sockets are
 * non-blocking, with TCP_NODELAY and keepalive; addresses and ports are in
 * network byte order; the errno values are returned, not set.
 *
 * Listens on bind_ip (0: any) and port (0: a free one), with a backlog for
 * many peers; the bound address and port in *ip_out and *port_out. */
int braid_exchange_listen_nb(uint32_t bind_ip, uint16_t port, int* fd_out, uint32_t* ip_out,
                             uint16_t* port_out);
/* A peer waiting on a listening socket: 0 and *fd_out, EAGAIN when none is
 * waiting yet, or an errno value. */
int braid_exchange_accept_nb(int listen_fd, int* fd_out);
/* Starts connecting to ip:port: 0 and *fd_out (connected or in progress),
 * or an errno value. */
int braid_exchange_connect_start(uint32_t ip, uint16_t port, int* fd_out);
/* 0 once the connection started on fd is made, EAGAIN while it is under
 * way, or the errno value it failed with. */
int braid_exchange_connect_done(int fd);
/* Moves len bytes, resuming at *off (0 at first, advanced by what moved):
 * 1 once all have, 0 to call again later, -1 when the peer is gone. */
int braid_exchange_send_some(int fd, const void* buf, size_t len, size_t* off);
int braid_exchange_recv_some(int fd, void* buf, size_t len, size_t* off);
/* 1 when the peer closed its end (its process exited), 0 otherwise. Reads
 * nothing: a byte waiting stays there. */
int braid_exchange_peer_closed(int fd);

/* The message codec, for tests and tools that carry it over other channels.
 * encode: EINVAL when a field exceeds its width. decode: EPROTO unless msg is
 * exactly one well-formed message. */
int braid_conn_info_encode(const struct braid_conn_info* info, char msg[BRAID_CONN_INFO_MSG_SIZE]);
int braid_conn_info_decode(const char msg[BRAID_CONN_INFO_MSG_SIZE], struct braid_conn_info* info);

#ifdef __cplusplus
}
#endif

#endif /* BRAID_CONNECT_H */

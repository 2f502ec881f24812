// The TCP exchange of QP information (include/braid/connect.h): perftest's
// message format, round trips over loopback, malformed input and timeouts,
// and the non-blocking steps a caller resumes (NCCL's connect and accept).
#include "braid/connect.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kLongMs = 20'000;  // generous bound for steps that should succeed

// A port nobody listens on right now (bound and released by the kernel).
uint16_t free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ADD_FAILURE() << "cannot find a free port: " << std::strerror(errno);
  }
  close(s);
  return ntohs(a.sin_port);
}

braid_conn_info make_info(uint32_t seed) {
  braid_conn_info info{};
  info.lid = seed & 0xffff;
  info.out_reads = 16;
  info.qpn = (0x10000 + seed * 7) & 0xffffff;
  info.psn = (seed * 0x9e3779b9u) & 0xffffff;
  info.rkey = 0xdead0000u | seed;
  info.vaddr = 0x00007f0000000000ull + uint64_t{seed} * 0x200000;
  info.gid.raw[10] = 0xff;
  info.gid.raw[11] = 0xff;
  info.gid.raw[12] = 198;
  info.gid.raw[13] = 18;
  info.gid.raw[14] = static_cast<uint8_t>(seed >> 8);
  info.gid.raw[15] = static_cast<uint8_t>(seed);
  info.srqn = seed * 3;
  return info;
}

void expect_same(const braid_conn_info& a, const braid_conn_info& b) {
  EXPECT_EQ(a.lid, b.lid);
  EXPECT_EQ(a.out_reads, b.out_reads);
  EXPECT_EQ(a.qpn, b.qpn);
  EXPECT_EQ(a.psn, b.psn);
  EXPECT_EQ(a.rkey, b.rkey);
  EXPECT_EQ(a.vaddr, b.vaddr);
  EXPECT_EQ(0, std::memcmp(a.gid.raw, b.gid.raw, sizeof a.gid.raw));
  EXPECT_EQ(a.srqn, b.srqn);
}

TEST(ConnInfoCodec, MatchesPerftestFormat) {
  braid_conn_info info{};
  info.lid = 0;
  info.out_reads = 0x10;
  info.qpn = 0xabcdef;
  info.psn = 0x123456;
  info.rkey = 0xdeadbeef;
  info.vaddr = 0x00007f0012345678ull;
  const uint8_t v4_mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1};
  std::memcpy(info.gid.raw, v4_mapped, sizeof v4_mapped);
  char msg[BRAID_CONN_INFO_MSG_SIZE];
  ASSERT_EQ(0, braid_conn_info_encode(&info, msg));
  EXPECT_EQ(std::string(msg),
            "0000:0010:abcdef:123456:deadbeef:00007f0012345678:"
            "00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:01:00000000:");
  EXPECT_EQ('\0', msg[BRAID_CONN_INFO_MSG_SIZE - 1]);
  braid_conn_info back{};
  ASSERT_EQ(0, braid_conn_info_decode(msg, &back));
  expect_same(info, back);
}

TEST(ConnInfoCodec, RoundTripsExtremes) {
  braid_conn_info info{};
  info.lid = 0xffff;
  info.out_reads = 0xffff;
  info.qpn = 0xffffff;
  info.psn = 0xffffff;
  info.rkey = 0xffffffff;
  info.vaddr = ~0ull;
  std::memset(info.gid.raw, 0xff, sizeof info.gid.raw);
  info.srqn = 0xffffffff;
  char msg[BRAID_CONN_INFO_MSG_SIZE];
  ASSERT_EQ(0, braid_conn_info_encode(&info, msg));
  braid_conn_info back{};
  ASSERT_EQ(0, braid_conn_info_decode(msg, &back));
  expect_same(info, back);
}

TEST(ConnInfoCodec, AcceptsUppercaseHex) {
  char msg[BRAID_CONN_INFO_MSG_SIZE];
  const braid_conn_info info = make_info(0xab);
  ASSERT_EQ(0, braid_conn_info_encode(&info, msg));
  for (char& c : msg) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  braid_conn_info back{};
  ASSERT_EQ(0, braid_conn_info_decode(msg, &back));
  expect_same(info, back);
}

TEST(ConnInfoCodec, RejectsFieldsWiderThanTheFormat) {
  char msg[BRAID_CONN_INFO_MSG_SIZE];
  braid_conn_info info = make_info(1);
  info.qpn = 0x1000000;
  EXPECT_EQ(EINVAL, braid_conn_info_encode(&info, msg));
  info = make_info(1);
  info.psn = 0x1000000;
  EXPECT_EQ(EINVAL, braid_conn_info_encode(&info, msg));
  info = make_info(1);
  info.lid = 0x10000;
  EXPECT_EQ(EINVAL, braid_conn_info_encode(&info, msg));
  info = make_info(1);
  info.out_reads = 0x10000;
  EXPECT_EQ(EINVAL, braid_conn_info_encode(&info, msg));
}

TEST(ConnInfoCodec, RejectsEverySingleByteCorruption) {
  char good[BRAID_CONN_INFO_MSG_SIZE];
  const braid_conn_info info = make_info(42);
  ASSERT_EQ(0, braid_conn_info_encode(&info, good));
  // 'x' is neither a hex digit, nor ':', nor NUL: every position must notice.
  for (size_t i = 0; i < sizeof good; ++i) {
    char bad[sizeof good];
    std::memcpy(bad, good, sizeof good);
    bad[i] = 'x';
    braid_conn_info out = make_info(7);
    EXPECT_EQ(EPROTO, braid_conn_info_decode(bad, &out)) << "position " << i;
    expect_same(out, make_info(7));  // untouched on failure
  }
}

TEST(ConnInfoCodec, RejectsShiftedFieldsAndGarbage) {
  // A field one digit short shifts every separator.
  char shifted[BRAID_CONN_INFO_MSG_SIZE] = {};
  std::snprintf(shifted, sizeof shifted, "%s",
                "000:0010:abcdef:123456:deadbeef:00007f0012345678:"
                "00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:01:00000000:0");
  braid_conn_info out{};
  EXPECT_EQ(EPROTO, braid_conn_info_decode(shifted, &out));
  // sscanf-isms perftest would accept: sign, 0x prefix, spaces.
  char signs[BRAID_CONN_INFO_MSG_SIZE] = {};
  std::snprintf(signs, sizeof signs, "%s",
                "+000:0010:abcdef:123456:deadbeef:0x007f0012345678:"
                "00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:01: 0000000:");
  EXPECT_EQ(EPROTO, braid_conn_info_decode(signs, &out));

  std::mt19937 rng(1234);
  for (int n = 0; n < 2000; ++n) {
    char msg[BRAID_CONN_INFO_MSG_SIZE];
    for (char& c : msg) c = static_cast<char>(rng());
    EXPECT_EQ(EPROTO, braid_conn_info_decode(msg, &out));
  }
}

TEST(Exchange, RoundTripOfSeveralQps) {
  constexpr int kQps = 5;
  const uint16_t port = free_port();
  std::vector<braid_conn_info> server_mine, client_mine;
  for (int i = 0; i < kQps; ++i) {
    server_mine.push_back(make_info(0x100 + i));
    client_mine.push_back(make_info(0x200 + i));
  }
  std::vector<braid_conn_info> server_got(kQps), client_got(kQps);
  std::string server_report(4096, '\0'), client_report(4096, '\0');
  const std::string server_line(4096, 's'), client_line(4096, 'c');

  int server_rc[4] = {-1, -1, -1, -1};
  std::thread server([&] {
    int fd = -1;
    server_rc[0] = braid_exchange_listen(port, kLongMs, &fd);
    if (server_rc[0] != 0) return;
    server_rc[1] = braid_exchange_info(fd, server_mine.data(), server_got.data(), kQps);
    server_rc[2] = braid_exchange_barrier(fd);
    server_rc[3] = braid_exchange_data(fd, server_line.data(), server_report.data(), 4096);
    braid_exchange_close(fd);
  });

  int fd = -1;
  const int connect_rc = braid_exchange_connect("127.0.0.1", port, kLongMs, &fd);
  int info_rc = -1, barrier_rc = -1, data_rc = -1;
  if (connect_rc == 0) {
    info_rc = braid_exchange_info(fd, client_mine.data(), client_got.data(), kQps);
    barrier_rc = braid_exchange_barrier(fd);
    data_rc = braid_exchange_data(fd, client_line.data(), client_report.data(), 4096);
    braid_exchange_close(fd);
  }
  server.join();

  ASSERT_EQ(0, connect_rc);
  EXPECT_EQ(0, info_rc);
  EXPECT_EQ(0, barrier_rc);
  EXPECT_EQ(0, data_rc);
  for (int rc : server_rc) EXPECT_EQ(0, rc);
  for (int i = 0; i < kQps; ++i) {
    expect_same(client_mine[i], server_got[i]);
    expect_same(server_mine[i], client_got[i]);
  }
  EXPECT_EQ(client_line, server_report);
  EXPECT_EQ(server_line, client_report);
}

TEST(Exchange, ClientStartedBeforeServerRetries) {
  const uint16_t port = free_port();
  int client_rc = -1, barrier_rc = -1;
  std::thread client([&] {
    int fd = -1;
    client_rc = braid_exchange_connect("localhost", port, kLongMs, &fd);
    if (client_rc == 0) {
      barrier_rc = braid_exchange_barrier(fd);
      braid_exchange_close(fd);
    }
  });
  int fd = -1;
  const int listen_rc = braid_exchange_listen_addr("127.0.0.1", port, kLongMs, &fd);
  const int server_barrier_rc = listen_rc == 0 ? braid_exchange_barrier(fd) : -1;
  if (listen_rc == 0) braid_exchange_close(fd);
  client.join();
  EXPECT_EQ(0, listen_rc);
  EXPECT_EQ(0, server_barrier_rc);
  EXPECT_EQ(0, client_rc);
  EXPECT_EQ(0, barrier_rc);
}

TEST(Exchange, MalformedMessageIsRejected) {
  const uint16_t port = free_port();
  int server_rc = -1;
  braid_conn_info got{};
  std::thread server([&] {
    int fd = -1;
    if (braid_exchange_listen(port, kLongMs, &fd) != 0) return;
    server_rc = braid_exchange_info(fd, &got, &got, 1);
    braid_exchange_close(fd);
  });
  int fd = -1;
  const int connect_rc = braid_exchange_connect("127.0.0.1", port, kLongMs, &fd);
  if (connect_rc == 0) {
    char garbage[BRAID_CONN_INFO_MSG_SIZE];
    std::memset(garbage, 'A', sizeof garbage);
    garbage[4] = 'G';  // a non-hex digit in the out_reads field
    EXPECT_EQ(ssize_t{sizeof garbage}, send(fd, garbage, sizeof garbage, MSG_NOSIGNAL));
  }
  server.join();
  if (connect_rc == 0) braid_exchange_close(fd);
  ASSERT_EQ(0, connect_rc);
  EXPECT_EQ(EPROTO, server_rc);
}

TEST(Exchange, PeerClosingMidMessageIsReported) {
  const uint16_t port = free_port();
  int server_rc = -1;
  std::thread server([&] {
    int fd = -1;
    if (braid_exchange_listen(port, kLongMs, &fd) != 0) return;
    braid_conn_info mine = make_info(1), theirs{};
    server_rc = braid_exchange_info(fd, &mine, &theirs, 1);
    braid_exchange_close(fd);
  });
  int fd = -1;
  const int connect_rc = braid_exchange_connect("127.0.0.1", port, kLongMs, &fd);
  if (connect_rc == 0) {
    const char partial[] = "0000:0010:abc";
    EXPECT_EQ(ssize_t{sizeof partial}, send(fd, partial, sizeof partial, MSG_NOSIGNAL));
    braid_exchange_close(fd);
  }
  server.join();
  ASSERT_EQ(0, connect_rc);
  EXPECT_EQ(ECONNRESET, server_rc);
}

TEST(Exchange, BarrierAgainstInfoMessageIsAProtocolError) {
  const uint16_t port = free_port();
  int server_rc = -1;
  std::thread server([&] {
    int fd = -1;
    if (braid_exchange_listen(port, kLongMs, &fd) != 0) return;
    server_rc = braid_exchange_barrier(fd);
    braid_exchange_close(fd);
  });
  int fd = -1;
  const int connect_rc = braid_exchange_connect("127.0.0.1", port, kLongMs, &fd);
  int client_rc = -1;
  if (connect_rc == 0) {
    // The client sends a QP message where the server expects the barrier:
    // the server rejects it and hangs up, the client sees the hang-up.
    braid_conn_info mine = make_info(2), theirs{};
    client_rc = braid_exchange_info(fd, &mine, &theirs, 1);
    braid_exchange_close(fd);
  }
  server.join();
  ASSERT_EQ(0, connect_rc);
  EXPECT_EQ(EPROTO, server_rc);
  EXPECT_NE(0, client_rc);
}

TEST(Exchange, ConnectTimesOutWhenNobodyListens) {
  const uint16_t port = free_port();
  int fd = -1;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ETIMEDOUT, braid_exchange_connect("127.0.0.1", port, 150, &fd));
  // Bounded: a loose upper limit, not a timing measurement.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(-1, fd);
}

TEST(Exchange, ListenTimesOutWhenNobodyConnects) {
  int fd = -1;
  EXPECT_EQ(ETIMEDOUT, braid_exchange_listen(free_port(), 100, &fd));
  EXPECT_EQ(-1, fd);
}

TEST(Exchange, ReadTimesOutWhenThePeerIsSilent) {
  const uint16_t port = free_port();
  std::promise<void> client_done;
  std::thread server([&] {
    int fd = -1;
    if (braid_exchange_listen(port, kLongMs, &fd) != 0) return;
    client_done.get_future().wait();  // accepts, then says nothing
    braid_exchange_close(fd);
  });
  int fd = -1;
  const int connect_rc = braid_exchange_connect("127.0.0.1", port, kLongMs, &fd);
  int rc = -1;
  if (connect_rc == 0) {
    EXPECT_EQ(0, braid_exchange_set_timeout(fd, 100));
    braid_conn_info mine = make_info(3), theirs{};
    rc = braid_exchange_info(fd, &mine, &theirs, 1);
    braid_exchange_close(fd);
  }
  client_done.set_value();
  server.join();
  ASSERT_EQ(0, connect_rc);
  EXPECT_EQ(ETIMEDOUT, rc);
}

struct IdleProbe {
  std::atomic<int> calls{0};
  std::promise<void> reached;
};

void idle_hook(void* arg) {
  auto* probe = static_cast<IdleProbe*>(arg);
  if (++probe->calls == 3) probe->reached.set_value();
}

TEST(Exchange, IdleHookRunsWhileWaiting) {
  const uint16_t port = free_port();
  IdleProbe probe;
  std::future<void> reached = probe.reached.get_future();
  int server_rc = -1;
  std::thread server([&] {
    int fd = -1;
    if (braid_exchange_listen(port, kLongMs, &fd) != 0) return;
    // Only once the client's hook has run, answer its barrier.
    if (reached.wait_for(std::chrono::milliseconds(kLongMs)) != std::future_status::ready) return;
    server_rc = braid_exchange_barrier(fd);
    braid_exchange_close(fd);
  });
  int fd = -1;
  const int connect_rc = braid_exchange_connect("127.0.0.1", port, kLongMs, &fd);
  int rc = -1;
  if (connect_rc == 0) {
    EXPECT_EQ(0, braid_exchange_set_idle(fd, idle_hook, &probe));
    rc = braid_exchange_barrier(fd);
    braid_exchange_close(fd);
  } else {
    probe.reached.set_value();  // let the server thread finish
  }
  server.join();
  ASSERT_EQ(0, connect_rc);
  EXPECT_EQ(0, rc);
  EXPECT_EQ(0, server_rc);
  EXPECT_GE(probe.calls.load(), 3);
}

TEST(Exchange, RejectsBadArguments) {
  int fd = -1;
  EXPECT_EQ(EINVAL, braid_exchange_connect(nullptr, 1, 0, &fd));
  EXPECT_EQ(EINVAL, braid_exchange_listen_addr("not-an-address", 1, 0, &fd));
  EXPECT_EQ(EBADF, braid_exchange_barrier(-1));
  EXPECT_EQ(EBADF, braid_exchange_set_timeout(-1, 0));
  braid_conn_info info{};
  EXPECT_EQ(EINVAL, braid_exchange_info(-1, &info, &info, -1));
}

// Waits (poll, bounded) until fd is ready for `events`; false on timeout.
bool ready(int fd, short events) {
  pollfd p{fd, events, 0};
  return poll(&p, 1, kLongMs) == 1;
}

TEST(ExchangeNonBlocking, ListenConnectAcceptAndResumableTransfersBothWays) {
  int lfd = -1;
  uint32_t ip = 0;
  uint16_t port = 0;
  ASSERT_EQ(0, braid_exchange_listen_nb(htonl(INADDR_LOOPBACK), 0, &lfd, &ip, &port));
  EXPECT_EQ(ip, htonl(INADDR_LOOPBACK));
  EXPECT_NE(port, 0);  // a free port was chosen
  int sfd = -1;
  EXPECT_EQ(EAGAIN, braid_exchange_accept_nb(lfd, &sfd));  // nobody yet
  int cfd = -1;
  ASSERT_EQ(0, braid_exchange_connect_start(ip, port, &cfd));
  ASSERT_TRUE(ready(lfd, POLLIN));
  ASSERT_EQ(0, braid_exchange_accept_nb(lfd, &sfd));
  ASSERT_TRUE(ready(cfd, POLLOUT));
  ASSERT_EQ(0, braid_exchange_connect_done(cfd));

  // More than the socket buffers take at once: the transfers resume where
  // they stopped, each side's calls interleaved in one thread.
  std::vector<uint8_t> out(8 << 20), in(out.size());
  std::mt19937 rng(7);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  size_t sent = 0, got = 0;
  int s = 0, r = 0, calls = 0;
  while (s != 1 || r != 1) {
    if (s != 1) s = braid_exchange_send_some(cfd, out.data(), out.size(), &sent);
    if (r != 1) r = braid_exchange_recv_some(sfd, in.data(), in.size(), &got);
    ASSERT_GE(s, 0);
    ASSERT_GE(r, 0);
    ++calls;
    // Until one of them can go on: the receiver has bytes, or the sender room.
    pollfd p[2] = {{sfd, POLLIN, 0}, {cfd, static_cast<short>(s != 1 ? POLLOUT : 0), 0}};
    if (r != 1) {
      ASSERT_GT(poll(p, 2, kLongMs), 0);
    }
  }
  EXPECT_GT(calls, 1);  // it did not all go in one call
  EXPECT_EQ(out, in);
  uint8_t answer = 42, back = 0;
  size_t off = 0;
  ASSERT_EQ(1, braid_exchange_send_some(sfd, &answer, 1, &off));
  off = 0;
  ASSERT_TRUE(ready(cfd, POLLIN));
  ASSERT_EQ(1, braid_exchange_recv_some(cfd, &back, 1, &off));
  EXPECT_EQ(back, 42);

  // A byte waiting is not a close, and the peek leaves it there.
  off = 0;
  ASSERT_EQ(1, braid_exchange_send_some(cfd, &answer, 1, &off));
  ASSERT_TRUE(ready(sfd, POLLIN));
  EXPECT_EQ(0, braid_exchange_peer_closed(sfd));
  close(cfd);
  ASSERT_TRUE(ready(sfd, POLLIN));
  off = 0;
  back = 0;
  ASSERT_EQ(1, braid_exchange_recv_some(sfd, &back, 1, &off));
  EXPECT_EQ(back, 42);
  EXPECT_EQ(1, braid_exchange_peer_closed(sfd));
  off = 0;
  EXPECT_EQ(-1, braid_exchange_recv_some(sfd, &back, 1, &off));  // the peer is gone
  close(sfd);
  close(lfd);
}

TEST(ExchangeNonBlocking, AConnectionNobodyAcceptsFailsWithItsError) {
  int cfd = -1;
  ASSERT_EQ(0, braid_exchange_connect_start(htonl(INADDR_LOOPBACK), htons(free_port()), &cfd));
  ASSERT_TRUE(ready(cfd, POLLOUT));
  EXPECT_EQ(ECONNREFUSED, braid_exchange_connect_done(cfd));
  close(cfd);
  EXPECT_EQ(EINVAL, braid_exchange_listen_nb(0, 0, nullptr, nullptr, nullptr));
  EXPECT_EQ(EINVAL, braid_exchange_connect_start(0, 0, nullptr));
}

}  // namespace

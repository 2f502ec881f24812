// Microbenchmarks of the protocol core, no I/O: header encode/decode, the
// receiver's window update, the sender's ACK processing, and whole transfers
// between two connections handing frames to each other directly. The goal is
// that sender + receiver work per data packet stays well under 50 ns, so the
// core is never the bottleneck next to a 20 Mpps virtual NIC.
#include <benchmark/benchmark.h>

#include <atomic>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/completion_queue.h"
#include "core/endpoint.h"
#include "core/receive_window.h"
#include "core/sg_list.h"
#include "engine/packet_io.h"
#include "engine/spsc_ring.h"
#include "wire/crc32c.h"
#include "wire/frame.h"

namespace braid {
namespace {

wire::MacAddr mac(uint8_t b) {
  return {0x02, 0, 0, 0, 0, b};
}

void BM_EncodeDataHeaders(benchmark::State& state) {
  wire::FrameTemplate t(mac(1), mac(2), 0xc6120001, 0xc6120002, wire::kUetUdpPort);
  std::vector<uint8_t> buf(9000);
  uint32_t psn = 0;
  for (auto _ : state) {
    wire::RequestHeader r;
    r.pro.type = static_cast<uint8_t>(wire::PdsType::kRudReq);
    r.pro.next_hdr = static_cast<uint8_t>(wire::NextHeader::kSesStandard);
    r.psn = psn++;
    r.spdcid = 1;
    r.dpdcid = 2;
    wire::SesRequest s;
    s.opcode = 1;
    s.flags = wire::kSesFlagSom;
    s.buffer_offset = 0x1000 + psn;
    s.memory_key = 77;
    s.request_length = 65536;
    uint8_t* p = buf.data() + wire::kL2L4Size;
    wire::encode_request(p, r);
    wire::encode_ses_request(p + wire::kRequestSize, s);
    t.write(buf.data(), static_cast<uint16_t>(49152 + (psn & 63)), 4096 + 56, wire::kEcnEct0);
    benchmark::DoNotOptimize(buf.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_EncodeDataHeaders);

// The integrity trailer's cost per packet payload (SSE4.2 CRC-32C).
void BM_Crc32c(benchmark::State& state) {
  std::vector<uint8_t> buf(static_cast<size_t>(state.range(0)));
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 31);
  for (auto _ : state) {
    benchmark::DoNotOptimize(wire::crc32c(buf.data(), buf.size()));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_Crc32c)->Arg(64)->Arg(1416)->Arg(4096)->Arg(8916);

// What placement costs when many queue pairs write at once: 1416-byte
// payloads (MTU 1500) copied into `regions` regions of 64 KiB, each
// written from its start, one packet per region in turn, as a receiver
// places the interleaved packets of that many QPs' 64 KiB WRITEs (each
// perftest QP writes its own buffer). One region stays in cache; 1024
// (64 MiB) do not, and are more streams than the prefetchers follow.
void BM_PlaceInterleaved(benchmark::State& state) {
  constexpr size_t kPayload = 1416, kRegion = 65536, kPerRegion = kRegion / kPayload;
  const auto regions = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> dst(regions * kRegion, 1), src(kRegion, 3);
  size_t region = 0, slot = 0;
  for (auto _ : state) {
    copy_payload(dst.data() + region * kRegion + slot * kPayload, src.data() + slot * kPayload,
                 kPayload);
    if (++region == regions) {
      region = 0;
      if (++slot == kPerRegion) slot = 0;
    }
  }
  benchmark::DoNotOptimize(dst.data());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kPayload));
}
BENCHMARK(BM_PlaceInterleaved)->ArgName("regions")->Arg(1)->Arg(16)->Arg(1024);

// A receiver placing 8 KiB SENDs (UCX's eager fragments) at MTU 1500: six
// packets of 1416 bytes or less into each receive buffer, the buffers
// taken in turn from `span` bytes of them (UCX posts 4095 of 8 KiB: 32
// MiB), each copy asking for the next packet's lines (`ahead` 1,
// copy_to_sgl's prefetch) or not (0).
void BM_PlaceAhead(benchmark::State& state) {
  constexpr uint32_t kPayload = 1416, kMessage = 8192;
  const auto span = static_cast<size_t>(state.range(0));
  const bool ahead = state.range(1) != 0;
  std::vector<uint8_t> dst(span, 1), src(kMessage, 3);
  SgList l;
  l.num = 1;
  size_t buffer = 0;
  uint32_t offset = 0;
  int64_t bytes = 0;
  for (auto _ : state) {
    l.sge[0] = Sge{dst.data() + buffer, kMessage, 0};
    const uint32_t len = std::min(kPayload, kMessage - offset);
    copy_to_sgl(l, offset, src.data() + offset, len,
                ahead ? std::min(len, kMessage - offset - len) : 0);
    offset += len;
    bytes += len;
    if (offset == kMessage) {
      offset = 0;
      buffer += kMessage;
      if (buffer + kMessage > span) buffer = 0;
    }
  }
  benchmark::DoNotOptimize(dst.data());
  state.SetBytesProcessed(bytes);
}
BENCHMARK(BM_PlaceAhead)
    ->ArgNames({"span", "ahead"})
    ->Args({65536, 0})
    ->Args({65536, 1})
    ->Args({32 << 20, 0})
    ->Args({32 << 20, 1});

// The authenticated mode's cost per packet (AES-256-GCM, libcrypto): a
// request (PDS header, 44 bytes of SES, `payload` bytes) sealed, and one
// opened (checked and decrypted), as each end does to every packet.
std::vector<uint8_t> tss_packet(size_t payload) {
  std::vector<uint8_t> p(wire::kRequestSize + wire::kSesStandardSize + payload +
                         wire::kTssOverhead);
  p[0] = static_cast<uint8_t>(static_cast<uint8_t>(wire::PdsType::kRudReq) << 3);
  return p;
}
const wire::TssSecret kBenchSecret{1, 2, 3};
const wire::TssDirection kBenchDir{0xc6120001, 0xc6120002, 1, 2, 77};

void BM_TssSeal(benchmark::State& state) {
  auto key = wire::TssKey::derive(kBenchSecret, kBenchDir, 1);
  std::vector<uint8_t> p = tss_packet(static_cast<size_t>(state.range(0)));
  const size_t body = p.size() - wire::kTssOverhead;
  for (auto _ : state) {
    benchmark::DoNotOptimize(key->seal(p.data(), body, kBenchDir.src_ip, kBenchDir.dst_ip));
    std::memmove(p.data(), p.data() + wire::kTssHeaderSize, body);  // clear header again
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_TssSeal)->Arg(64)->Arg(1388)->Arg(8888);

void BM_TssOpen(benchmark::State& state) {
  auto tx = wire::TssKey::derive(kBenchSecret, kBenchDir, 1);
  auto rx = wire::TssKey::derive(kBenchSecret, kBenchDir, 1);
  std::vector<uint8_t> p = tss_packet(static_cast<size_t>(state.range(0)));
  tx->seal(p.data(), p.size() - wire::kTssOverhead, kBenchDir.src_ip, kBenchDir.dst_ip);
  wire::TssHeader h;
  wire::decode_tss_header(p.data(), p.size(), &h);
  std::vector<uint8_t> out(p.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        rx->open(p.data(), p.size(), h, kBenchDir.src_ip, kBenchDir.dst_ip, out.data()));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_TssOpen)->Arg(64)->Arg(1388)->Arg(8888);

void BM_DecodeDataFrame(benchmark::State& state) {
  wire::FrameTemplate t(mac(1), mac(2), 0xc6120001, 0xc6120002, wire::kUetUdpPort);
  std::vector<uint8_t> buf(wire::kL2L4Size + 56 + 4096);
  wire::RequestHeader r;
  r.pro.type = static_cast<uint8_t>(wire::PdsType::kRudReq);
  r.pro.next_hdr = static_cast<uint8_t>(wire::NextHeader::kSesStandard);
  wire::SesRequest s;
  s.opcode = 1;
  s.flags = wire::kSesFlagSom;
  s.request_length = 4096;
  wire::encode_request(buf.data() + wire::kL2L4Size, r);
  wire::encode_ses_request(buf.data() + wire::kL2L4Size + wire::kRequestSize, s);
  t.write(buf.data(), 49152, 56 + 4096, wire::kEcnEct0);
  wire::DecodeOptions opt;
  wire::ParsedPacket pkt;
  for (auto _ : state) {
    const auto reason = wire::decode_frame(buf.data(), buf.size(), opt, &pkt);
    benchmark::DoNotOptimize(reason);
    benchmark::DoNotOptimize(pkt.payload);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_DecodeDataFrame);

// Steering between engines (engine/engine_group.h), per frame: read the
// destination PDC id, pass a burst of 32 frame descriptors through the
// ring to another engine. Arg 0: one thread does both ends (the
// instructions alone); arg 1: a second thread takes them, as the owning
// engine on another core does (the cache lines cross cores).
void BM_SteerHandOver(benchmark::State& state) {
  const bool threaded = state.range(0) != 0;
  wire::FrameTemplate t(mac(1), mac(2), 0xc6120001, 0xc6120002, wire::kUetUdpPort);
  std::vector<uint8_t> frame(wire::kL2L4Size + wire::kAckCcSize);
  wire::AckHeader a;
  a.pro.type = static_cast<uint8_t>(wire::PdsType::kAckCc);
  a.dpdcid = 7;
  wire::encode_ack(frame.data() + wire::kL2L4Size, a);
  t.write(frame.data(), 49152, wire::kAckCcSize, wire::kEcnEct0);
  constexpr uint32_t kBurst = 32;
  SpscRing<RxFrame> ring(1024);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> taken{0};
  std::thread consumer;
  if (threaded) {
    consumer = std::thread([&] {
      RxFrame out[kBurst];
      uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const uint32_t got = ring.pop(out, kBurst);
        for (uint32_t i = 0; i < got; ++i) n += out[i].len;
      }
      taken = n;
    });
  }
  RxFrame burst[kBurst];
  RxFrame out[kBurst];
  uint64_t ids = 0;
  for (auto _ : state) {
    for (uint32_t i = 0; i < kBurst; ++i) {
      uint16_t id = 0;
      ids += wire::peek_dpdcid(frame.data(), frame.size(), &id) ? id : 0;
      burst[i] = RxFrame{frame.data(), static_cast<uint32_t>(frame.size()), nullptr};
    }
    uint32_t pushed = 0;
    while (pushed < kBurst) {
      pushed += ring.push(burst + pushed, kBurst - pushed);
      if (!threaded) ring.pop(out, kBurst);
    }
  }
  stop = true;
  if (consumer.joinable()) consumer.join();
  benchmark::DoNotOptimize(ids);
  benchmark::DoNotOptimize(taken.load());
  state.SetItemsProcessed(state.iterations() * kBurst);
}
BENCHMARK(BM_SteerHandOver)->Arg(0)->Arg(1)->UseRealTime();

// Receiver SACK update: mark one PSN and read the 64-bit SACK window, with
// arrivals in order (arg 0) or shuffled within blocks of 64 (arg 1).
void BM_ReceiveWindowUpdate(benchmark::State& state) {
  const bool shuffled = state.range(0) != 0;
  std::vector<uint32_t> order(64);
  for (uint32_t i = 0; i < 64; ++i) order[i] = shuffled ? (i * 37) % 64 : i;
  ReceiveWindow w(1024, 0);
  uint32_t block = 0;
  uint64_t sink = 0;
  for (auto _ : state) {
    for (uint32_t i : order) {
      const uint32_t psn = block + i;
      if (w.check(psn) == ReceiveWindow::Verdict::kNew) w.mark(psn);
      sink += w.sack_bits(w.cack() + 1);
    }
    block += 64;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations() * 64);
}
BENCHMARK(BM_ReceiveWindowUpdate)->Arg(0)->Arg(1);

// Two endpoints wired back to back, frames passed by pointer.
struct Pair {
  // `idle`: connections on each side besides the measured pair, which
  // never send (as on a server with many QPs, few of them busy).
  // `shared`: the measured pair is a shared PDC (ConnectionConfig::shared)
  // carrying this many queue pairs, which post_write takes in turn.
  Pair(uint32_t mtu, uint16_t entropies, uint16_t idle = 0, uint16_t shared = 0)
      : a(EndpointConfig{mac(1), 0xc6120001, wire::kUetUdpPort, false, 0xff, 1000, {}}),
        b(EndpointConfig{mac(2), 0xc6120002, wire::kUetUdpPort, false, 0xff, 1000, {}}),
        scq(1024),
        rcq(16),
        bscq(16),
        brcq(16) {
    ConnectionConfig c;
    c.mtu = mtu;
    c.entropy.count = entropies;
    c.window_packets = 1024;
    c.cc.window_bytes = 1u << 30;
    c.sq_depth = 512;
    ConnectionConfig ca = c, cb = c;
    ca.local_id = 1;
    ca.remote_id = 2;
    ca.remote_mac = mac(2);
    ca.remote_ip = 0xc6120002;
    cb.local_id = 2;
    cb.remote_id = 1;
    cb.remote_mac = mac(1);
    cb.remote_ip = 0xc6120001;
    if (shared > 0) {
      ca.shared = cb.shared = true;
      ca.qp_num = cb.remote_qpn = 1;
      cb.qp_num = ca.remote_qpn = 2;
    }
    qa = a.create_connection(ca, &scq, &rcq);
    qb = b.create_connection(cb, &bscq, &brcq);
    slots.push_back(0);
    for (uint16_t i = 1; i < shared; ++i) {
      // a's QP 1000 + i talks to b's 2000 + i.
      const auto na = static_cast<uint32_t>(1000 + i), nb = static_cast<uint32_t>(2000 + i);
      slots.push_back(a.attach_queue_pair(1, qa->queue_pair_config(na, nb), &scq, &rcq));
      b.attach_queue_pair(2, qb->queue_pair_config(nb, na), &bscq, &brcq);
    }
    if (shared > 0) {
      qa->speak_as(0, 0);
      qb->speak_as(0, 0);
    }
    ConnectionConfig small = c;
    small.window_packets = 128;
    small.sq_depth = small.rq_depth = 1;
    small.entropy.count = 1;
    for (uint16_t i = 0; i < idle; ++i) {
      ConnectionConfig ia = small, ib = small;
      ia.local_id = ib.remote_id = static_cast<uint16_t>(3 + i);
      ib.local_id = ia.remote_id = static_cast<uint16_t>(3 + i);
      ia.remote_mac = mac(2);
      ia.remote_ip = 0xc6120002;
      ib.remote_mac = mac(1);
      ib.remote_ip = 0xc6120001;
      a.create_connection(ia, &scq, &rcq);
      b.create_connection(ib, &bscq, &brcq);
    }
    src.assign(1 << 20, 0x5a);
    dst.assign(1 << 20, 0);
    rkey = b.memory().register_region(dst.data(), dst.size(), kAccessRemoteWrite, 0);
  }
  void post_write(uint32_t len) {
    SendRequest wr;
    wr.opcode = Opcode::kWrite;
    wr.signaled = false;
    wr.local.sge[0] = Sge{src.data(), len};
    wr.local.num = 1;
    wr.remote_addr = reinterpret_cast<uintptr_t>(dst.data());
    wr.rkey = rkey;
    qa->post_send(slots[next_slot++ % slots.size()], wr);
  }
  std::vector<uint16_t> slots;
  size_t next_slot = 0;
  Endpoint a, b;
  CompletionQueue scq, rcq, bscq, brcq;
  Connection* qa;
  Connection* qb;
  std::vector<uint8_t> src, dst;
  uint32_t rkey;
};

// Sender and receiver work per data packet: segmentation and header build,
// decode, window update, placement, ACK generation, ACK processing. Frames
// move in bursts of up to 32, as a poll-mode engine moves them.
[[gnu::always_inline]] inline void BM_CoreTransferWith(benchmark::State& state, uint16_t shared) {
  const uint32_t payload = static_cast<uint32_t>(state.range(0));
  const uint16_t entropies = static_cast<uint16_t>(state.range(1));
  const uint16_t idle = static_cast<uint16_t>(state.range(2));
  Pair p(payload, entropies, idle, shared);
  constexpr uint32_t kBurst = 32;
  // Buffers spaced like DPDK mbufs: 2 KiB data rooms, 9 KiB for jumbo frames.
  const uint32_t kFrame = payload + 256 <= 2048 ? 2048 : 9216;
  std::vector<uint8_t> frames(kBurst * kFrame);
  uint32_t lens[kBurst];
  TimeNs now = 0;
  uint64_t packets = 0;
  auto burst = [&](Endpoint& from, Endpoint& to) {
    uint32_t n = 0;
    while (n < kBurst) {
      const uint32_t len = from.transmit(frames.data() + n * kFrame, kFrame, now);
      if (len == 0) break;
      lens[n++] = len;
    }
    for (uint32_t i = 0; i < n; ++i) to.receive(frames.data() + i * kFrame, lens[i], now);
    return n;
  };
  for (auto _ : state) {
    // One 64-packet message per iteration.
    p.post_write(payload * 64);
    for (;;) {
      const uint32_t sent = burst(p.a, p.b);
      packets += sent;
      const uint32_t acks = burst(p.b, p.a);
      if (sent == 0 && acks == 0) break;
      now += 1000;
      p.a.advance(now);
      p.b.advance(now);
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(packets));
  state.counters["ns_per_packet"] = benchmark::Counter(
      static_cast<double>(packets), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
void BM_CoreTransfer(benchmark::State& state) {
  BM_CoreTransferWith(state, 0);
}
// The same on a shared PDC (a PDC per peer) of state.range(3) queue pairs,
// each message on the next: what the queue pairs' turns, completions and
// demultiplexing cost per packet.
void BM_CoreTransferShared(benchmark::State& state) {
  BM_CoreTransferWith(state, static_cast<uint16_t>(state.range(3)));
}
BENCHMARK(BM_CoreTransferShared)
    ->Args({64, 64, 0, 1})
    ->Args({64, 64, 0, 4})
    ->Args({64, 64, 0, 64})
    ->ArgNames({"payload", "entropies", "idle", "qps"});
// Every case names all three arguments: state.range(2) of a two-argument
// case reads past the argument list.
BENCHMARK(BM_CoreTransfer)
    ->Args({64, 1, 0})
    ->Args({64, 64, 0})
    ->Args({1024, 64, 0})
    ->Args({4096, 64, 0})
    ->ArgNames({"payload", "entropies", "idle"});
// The same beside idle connections: what choosing the next connection to
// send costs when most have nothing to send.
BENCHMARK(BM_CoreTransfer)
    ->Args({64, 64, 15})
    ->Args({64, 64, 255})
    ->Args({64, 64, 1023})
    ->ArgNames({"payload", "entropies", "idle"});

// The sender's side of an ACK alone: 960 packets are produced and received
// with the timer paused, then the receiver's ACKs are processed timed.
void BM_SenderAckProcessing(benchmark::State& state) {
  Pair p(64, 64);
  std::vector<uint8_t> frame(16384);
  std::vector<std::vector<uint8_t>> acks;
  TimeNs now = 0;
  uint64_t n_acks = 0;
  for (auto _ : state) {
    // Large batches: pausing the timer costs more than one ACK.
    state.PauseTiming();
    for (int m = 0; m < 15; ++m) p.post_write(64 * 64);
    acks.clear();
    uint32_t n;
    while ((n = p.a.transmit(frame.data(), static_cast<uint32_t>(frame.size()), now)) > 0) {
      p.b.receive(frame.data(), n, now);
      while ((n = p.b.transmit(frame.data(), static_cast<uint32_t>(frame.size()), now)) > 0) {
        acks.emplace_back(frame.begin(), frame.begin() + n);
      }
      now += 100;
    }
    state.ResumeTiming();
    for (const auto& f : acks) p.a.receive(f.data(), static_cast<uint32_t>(f.size()), now);
    n_acks += acks.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(n_acks));
}
BENCHMARK(BM_SenderAckProcessing);

}  // namespace
}  // namespace braid

BENCHMARK_MAIN();

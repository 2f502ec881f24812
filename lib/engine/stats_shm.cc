#include "engine/stats_shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <memory>

#include "engine/engine.h"

namespace braid::stats {

namespace {

constexpr size_t align64(size_t n) {
  return (n + 63) & ~size_t{63};
}

// The seqlock's fences: between the odd sequence and the snapshot's stores,
// and between the snapshot's loads and the second look at the sequence.
// GCC refuses atomic_thread_fence under ThreadSanitizer (-Wtsan); on x86,
// which keeps stores in order and loads in order, a compiler barrier is
// the same fence.
inline void seq_fence() {
#if defined(__SANITIZE_THREAD__) && (defined(__x86_64__) || defined(__i386__))
  std::atomic_signal_fence(std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

struct Layout {
  size_t info, conns, paths, total;
  Layout(uint32_t max_conns, uint32_t max_paths) {
    info = align64(sizeof(Control));
    conns = info + align64(sizeof(Info));
    paths = conns + align64(sizeof(Conn) * max_conns);
    total = paths + sizeof(Path) * size_t{max_conns} * max_paths;
  }
};

std::atomic<uint32_t> next_object{0};

}  // namespace

std::unique_ptr<Publisher> Publisher::create(uint32_t max_conns, uint32_t max_paths,
                                             std::string* error) {
  std::unique_ptr<Publisher> p(new Publisher());
  p->name_ = std::string(kPrefix) + std::to_string(getpid()) + "." +
             std::to_string(next_object.fetch_add(1));
  const Layout l(max_conns, max_paths);
  const std::string path = "/" + p->name_;
  // A stale object of a process that had our pid goes first.
  shm_unlink(path.c_str());
  const int fd = shm_open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0644);
  if (fd < 0) {
    if (error) *error = "statistics: shm_open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (ftruncate(fd, static_cast<off_t>(l.total)) != 0) {
    if (error) *error = "statistics: ftruncate " + path + ": " + std::strerror(errno);
    close(fd);
    shm_unlink(path.c_str());
    return nullptr;
  }
  void* base = mmap(nullptr, l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    if (error) *error = "statistics: mmap " + path + ": " + std::strerror(errno);
    shm_unlink(path.c_str());
    return nullptr;
  }
  p->base_ = base;
  p->bytes_ = l.total;
  auto* bytes = static_cast<uint8_t*>(base);
  p->control_ = new (bytes) Control{};
  p->info_ = new (bytes + l.info) Info{};
  p->conns_ = reinterpret_cast<Conn*>(bytes + l.conns);
  p->paths_ = reinterpret_cast<Path*>(bytes + l.paths);
  Control& c = *p->control_;
  c.info_bytes = sizeof(Info);
  c.conn_bytes = sizeof(Conn);
  c.path_bytes = sizeof(Path);
  c.max_conns = max_conns;
  c.max_paths = max_paths;
  c.pid = getpid();
  c.version = kVersion;
  // Readers trust nothing before the magic.
  c.magic.store(kMagic, std::memory_order_release);
  return p;
}

Publisher::~Publisher() {
  if (base_ != nullptr) munmap(base_, bytes_);
  shm_unlink(("/" + name_).c_str());
}

void Publisher::publish(Engine& engine, TimeNs now) {
  Control& c = *control_;
  const uint64_t seq = c.seq.load(std::memory_order_relaxed);
  c.seq.store(seq + 1, std::memory_order_relaxed);
  seq_fence();

  Info& in = *info_;
  if (in.publications == 0) {
    in.ip = engine.config().ip;
    in.udp_port = engine.config().udp_port;
  }
  // (A string built ten times a second: the link's state is in it.)
  in.link_bps = uint64_t{engine.io().link_mbps()} * 1'000'000;
  const std::string d = engine.io().describe();
  std::strncpy(in.port, d.c_str(), sizeof(in.port) - 1);
  in.time_ns = now;
  ++in.publications;
  const EngineStats& es = engine.stats();
  const PacketIoStats io = engine.io().stats();
  in.polls = es.polls;
  in.rx_frames = io.rx_frames;
  in.tx_frames = io.tx_frames;
  in.rx_dropped = engine.endpoint().stats().dropped();
  in.rx_missed = io.rx_missed;
  in.tx_dropped = io.tx_dropped;
  in.tx_ring_full = es.tx_ring_full;
  in.tx_no_buffer = es.tx_no_buffer;
  in.local_frames = es.local_frames;
  in.arp_frames = es.arp_frames;

  uint32_t n = 0, total = 0;
  const Endpoint& ep = engine.endpoint();
  for (uint32_t id = 0; id < ep.connection_slots(); ++id) {
    const Connection* conn = ep.connection(static_cast<uint16_t>(id));
    if (conn == nullptr) continue;
    ++total;
    if (n == c.max_conns) continue;
    Conn& o = conns_[n];
    const ConnectionConfig& cfg = conn->config();
    const PathSet& ps = conn->paths();
    o.qp_num = cfg.qp_num;
    o.local_id = cfg.local_id;
    o.remote_id = cfg.remote_id;
    o.remote_ip = cfg.remote_ip;
    o.state = static_cast<uint8_t>(conn->state());
    o.cc = static_cast<uint8_t>(conn->cc().algorithm());
    o.policy = static_cast<uint8_t>(ps.policy());
    o.credit = conn->uses_credit() ? 1 : 0;
    o.entropies = ps.count();
    o.paths_bad = ps.bad_count();
    o.paths = static_cast<uint16_t>(std::min<uint32_t>(ps.count(), c.max_paths));
    o.cwnd_bytes = conn->cc().cwnd_bytes();
    o.inflight_bytes = conn->inflight_bytes();
    o.rate_bps = conn->cc().pacing_rate_bps();
    o.srtt_ns = conn->srtt();
    o.min_rtt_ns = conn->min_rtt();
    o.counters = conn->stats();
    Path* out = paths_ + size_t{n} * c.max_paths;
    for (uint16_t i = 0; i < o.paths; ++i) {
      const auto e = static_cast<uint8_t>(i);
      const EntropyStats& s = ps.stats(e);
      const PathHealth& h = ps.health(e);
      Path& p = out[i];
      p.udp_src_port = ps.entropy(e);
      p.state = static_cast<uint8_t>(h.state);
      p.losses_in_row = h.losses_in_row;
      p.mark_rate = h.mark_rate;
      p.sent = s.sent;
      p.acked = s.acked;
      p.ecn_marked = s.ecn_marked;
      p.lost = s.lost;
      p.srtt_ns = s.srtt_ns;
      p.min_rtt_ns = s.min_rtt_ns;
      p.late_ns = s.late_ns;
    }
    ++n;
  }
  in.conns = n;
  in.conns_total = total;

  c.seq.store(seq + 2, std::memory_order_release);
}

bool read_snapshot(const std::string& name, Snapshot* out, std::string* error) {
  auto fail = [&](const std::string& why) {
    if (error) *error = name + ": " + why;
    return false;
  };
  const int fd = shm_open(("/" + name).c_str(), O_RDONLY, 0);
  if (fd < 0) return fail(std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(Control)) {
    close(fd);
    return fail("too small for a statistics object");
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return fail(std::string("mmap: ") + std::strerror(errno));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{base, bytes};
  const auto* b = static_cast<const uint8_t*>(base);
  const auto* c = reinterpret_cast<const Control*>(b);
  if (c->magic.load(std::memory_order_acquire) != kMagic) {
    return fail("not a Braid statistics object (or not initialised yet)");
  }
  if (c->version != kVersion || c->info_bytes != sizeof(Info) || c->conn_bytes != sizeof(Conn) ||
      c->path_bytes != sizeof(Path)) {
    return fail("written by another version of Braid (layout " + std::to_string(c->version) + ")");
  }
  const Layout l(c->max_conns, c->max_paths);
  if (l.total > bytes) return fail("shorter than its layout");
  // A writer that stops mid-rewrite (it died) must not hang the reader.
  for (int attempt = 0; attempt < 100000; ++attempt) {
    const uint64_t s1 = c->seq.load(std::memory_order_acquire);
    if (s1 & 1) continue;
    Info info;
    std::memcpy(&info, b + l.info, sizeof(Info));
    const uint32_t n = std::min(info.conns, c->max_conns);
    out->conns.resize(n);
    if (n > 0) std::memcpy(out->conns.data(), b + l.conns, sizeof(Conn) * n);
    out->paths.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      const uint16_t k =
          std::min<uint16_t>(out->conns[i].paths, static_cast<uint16_t>(c->max_paths));
      out->paths[i].resize(k);
      if (k == 0) continue;
      std::memcpy(out->paths[i].data(), b + l.paths + sizeof(Path) * size_t{i} * c->max_paths,
                  sizeof(Path) * k);
    }
    seq_fence();
    if (c->seq.load(std::memory_order_relaxed) != s1) continue;
    if (s1 == 0) return fail("nothing published yet");
    out->pid = c->pid;
    out->max_paths = c->max_paths;
    out->info = info;
    return true;
  }
  return fail("the writer did not finish a snapshot (it may have died mid-write)");
}

std::vector<Listing> list_publishers() {
  std::vector<Listing> out;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind(kPrefix, 0) != 0) continue;
    const std::string rest = n.substr(std::strlen(kPrefix));
    const int32_t pid = std::atoi(rest.c_str());
    if (pid <= 0) continue;
    const bool alive = kill(pid, 0) == 0 || errno == EPERM;
    out.push_back({n, pid, alive});
  }
  closedir(d);
  std::sort(out.begin(), out.end(),
            [](const Listing& a, const Listing& b) { return a.name < b.name; });
  return out;
}

}  // namespace braid::stats

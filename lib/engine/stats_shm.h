// Live statistics: an engine publishes its port's, its connections' and
// their entropies' counters into a POSIX shared-memory object that other
// processes (braid_stat) read while it runs, without a lock and without
// asking it anything.
//
// The object, /dev/shm/braid-stats.<pid>.<n>, is a seqlock: the engine's
// poll loop (the only writer) makes the sequence odd, rewrites the snapshot
// and makes it even again, every `interval` of its clock; a reader copies
// the snapshot and keeps the copy if the sequence was the same even number
// before and after. The engine thread alone touches the live counters, so
// publishing needs no lock either: it costs one copy of each connection's
// counters per interval, nothing per packet.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/connection.h"
#include "core/types.h"

namespace braid {

class Engine;

namespace stats {

constexpr uint32_t kMagic = 0x54535242;  // "BRST"
constexpr uint32_t kVersion = 1;
constexpr const char* kPrefix = "braid-stats.";

struct Control {
  std::atomic<uint32_t> magic;  // kMagic once the rest is set
  uint32_t version;
  // The layout's sizes: a reader built from other sources refuses a mismatch.
  uint32_t info_bytes, conn_bytes, path_bytes;
  uint32_t max_conns, max_paths;  // slots: connection i's paths at i * max_paths
  int32_t pid;
  std::atomic<uint64_t> seq;  // odd while the writer rewrites what follows
};

// The port and the engine.
struct Info {
  uint32_t ip;  // host order
  uint16_t udp_port;
  uint16_t pad0;
  uint64_t link_bps;      // the port's link rate; 0: unknown (a host-local PMD's)
  char port[96];          // the backend's description
  uint64_t time_ns;       // the engine's clock at publication (steady clock)
  uint64_t publications;  // so far, this one included
  uint32_t conns;         // connection slots filled below
  uint32_t conns_total;   // connections in the engine (more than max_conns: the rest not shown)
  uint64_t polls, rx_frames, tx_frames, rx_dropped, rx_missed, tx_dropped, tx_ring_full,
      tx_no_buffer, local_frames, arp_frames;
};

struct Conn {
  uint32_t qp_num;
  uint16_t local_id, remote_id;
  uint32_t remote_ip;
  uint8_t state;   // ConnectionState: 0 active, 1 error
  uint8_t cc;      // CcAlgorithm
  uint8_t policy;  // PathPolicy
  uint8_t credit;  // receiver-driven credit on
  uint16_t entropies, paths_bad;
  uint16_t paths;  // entropies shown (at most max_paths)
  uint16_t pad0;
  uint32_t cwnd_bytes, inflight_bytes;
  uint64_t rate_bps;  // pacing rate (0: not paced)
  uint64_t srtt_ns, min_rtt_ns;
  ConnectionStats counters;
};

struct Path {
  uint16_t udp_src_port;
  uint8_t state;  // PathState: 0 good, 1 skipped, 2 assumed bad
  uint8_t losses_in_row;
  uint16_t mark_rate;  // ECN-CE fraction (EWMA) in 1/32768ths
  uint16_t pad0;
  uint32_t sent, acked, ecn_marked, lost;
  uint32_t srtt_ns, min_rtt_ns, late_ns;
};

// The writer: one per engine (Engine::enable_stats).
class Publisher {
 public:
  // Creates /dev/shm/<name> (name: kPrefix + pid + "." + a number unique in
  // the process) sized for max_conns connections of max_paths entropies.
  static std::unique_ptr<Publisher> create(uint32_t max_conns, uint32_t max_paths,
                                           std::string* error);
  ~Publisher();  // unlinks the object
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  const std::string& name() const { return name_; }
  void publish(Engine& engine, TimeNs now);

 private:
  Publisher() = default;
  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  Control* control_ = nullptr;
  Info* info_ = nullptr;
  Conn* conns_ = nullptr;
  Path* paths_ = nullptr;
};

// What a reader copies out.
struct Snapshot {
  int32_t pid = 0;
  uint32_t max_paths = 0;
  Info info{};
  std::vector<Conn> conns;
  std::vector<std::vector<Path>> paths;  // per connection
};

// Reads a consistent snapshot of /dev/shm/<name>. False (and *error) when it
// cannot be opened, is not a Braid statistics object of this layout, or
// stays mid-rewrite for too long.
bool read_snapshot(const std::string& name, Snapshot* out, std::string* error);

// The statistics objects in /dev/shm, and whether their process still runs.
struct Listing {
  std::string name;
  int32_t pid;
  bool alive;
};
std::vector<Listing> list_publishers();

}  // namespace stats
}  // namespace braid

// Workloads on the fabric: hosts with Braid endpoints, one RC connection
// pair per flow, each flow one RDMA WRITE of its size posted at its start
// time; its flow completion time (FCT) is when the sender's completion
// arrives (every byte placed and acknowledged).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/completion_queue.h"
#include "core/endpoint.h"
#include "fabric/fabric.h"
#include "fabric/topology.h"

namespace braid::fabric {

struct FlowSpec {
  int src = 0, dst = 0;
  uint64_t bytes = 0;
  TimeNs start = 0;
  // Starts only once flow `after` (an index into the experiment's flows) has
  // completed, and not before `start`: the steps of a collective.
  int after = kNone;
  // Flows between the same two hosts with the same qp share a queue pair
  // (their WRITEs follow each other on it); another qp is another queue
  // pair, as an application that opens several QPs to a peer: on a
  // connection of its own, or with Profile::pdc_per_peer on the host
  // pair's one connection.
  uint16_t qp = 0;
};

// How the transport is set up on every connection.
struct Profile {
  std::string name = "braid";
  uint16_t entropies = 64;
  uint32_t mtu = 4096;                         // payload bytes per packet
  uint32_t window_bytes = 0;                   // 0: the core's default fixed window
  CcAlgorithm cc = CcAlgorithm::kFixedWindow;  // NSCC is given the fabric's base RTT and rate
  PathPolicy paths = PathPolicy::kRoundRobin;
  bool credit = false;  // receiver-driven credit on top of `cc` (receivers pace at their link)
  uint32_t credit_speculative_bytes = 0;  // 0: one BDP
  TimeNs rto_min_ns = 0;                  // 0: scaled from the base RTT
  uint32_t ack_every = 8;
  // What NSCC scales itself by, where it is not the fabric's own (0: the
  // fabric's base RTT; the host link's rate).
  TimeNs cc_base_rtt_ns = 0;
  uint64_t cc_link_bps = 0;
  // NSCC's largest window from the flow's own smallest RTT, as htsim has it
  // (CcConfig::max_window_from_measured_rtt); the verbs profile keeps the
  // network's.
  bool max_window_from_measured_rtt = true;
  // A host's connections to one peer share one congestion state
  // (EndpointConfig::cc_per_peer); false: one each.
  bool cc_per_peer = true;
  // A host's QPs to one peer (flows from one host to another with
  // different qps) are queue pairs of one connection, one PDC per peer as
  // verbs' pdc_per_peer, in each direction (flows the other way have a
  // connection of their own, as every flow here); false: a connection each.
  bool pdc_per_peer = false;
};

// The transport profiles: braid (64 entropies round robin, fixed window),
// single-path and pfc (1 entropy, fixed window), nscc (64 entropies round
// robin, NSCC), nscc-reps (64 entropies by REPS, NSCC), nscc-bitmap (64
// entropies by bitmap penalty, NSCC), credit (64 entropies by REPS,
// receiver-driven credit, fixed window), nscc-credit (64 entropies by REPS,
// NSCC and receiver-driven credit), rocev2-like (1 entropy, DCQCN, over
// PFC), verbs (the verbs layer's defaults on a memif port: 16 entropies by
// REPS, NSCC scaled by a 25 us network base RTT and the 100 Gb/s memif
// reports, a 2 ms least RTO, an ACK per the receiver's default).
Profile profile_named(const std::string& name);

// Round-trip time between hosts furthest apart (other pods or leaves): a
// full-size packet's propagation and serialisation at every hop there, an
// ACK's propagation back.
TimeNs base_rtt_ns(const TopologyConfig& t, const Profile& p);

struct ExperimentConfig {
  TopologyConfig topo;
  Profile profile;
  uint64_t seed = 42;
  // Every flow gets its own source and destination memory, checked byte for
  // byte at the end (tests); otherwise flows share scratch buffers.
  bool verify = false;
};

struct FlowResult {
  FlowSpec spec;
  TimeNs started = kNever;  // when its WRITE was posted
  TimeNs end = kNever;      // virtual time of the sender's completion
  bool ok = false;
  WcStatus status = WcStatus::kSuccess;  // the sender's completion
  bool data_ok = true;                   // with verify: the destination holds the source's bytes
  ConnectionStats sender, receiver;      // of the connection it ran on (shared by its host pair)
  // Its packets acknowledged with ECN-CE (the sender's entropy counters
  // while it ran; with a PDC per peer, those of every QP of its host pair
  // then: the counters are the connection's).
  uint64_t ecn_acked = 0;
  TimeNs fct() const { return end == kNever || started == kNever ? kNever : end - started; }
};

struct Summary {
  size_t flows = 0, completed = 0, failed = 0;
  double fct_mean_us = 0, fct_p50_us = 0, fct_p99_us = 0, fct_max_us = 0;
  double goodput_mean_pct = 0, goodput_min_pct = 0;  // size / FCT, % of the host's links
  double jain = 0;                                   // of the goodputs
  // Summed over the connections (one per host pair).
  uint64_t retransmits = 0, timeouts = 0, trimmed_received = 0, nacks = 0;
  uint64_t fabric_dropped = 0, fabric_trimmed = 0, fabric_ecn = 0, bytes_lost = 0;
  uint64_t peak_queue_bytes = 0;
  uint64_t pauses = 0;
  TimeNs paused_ns = 0;  // PFC pause time summed over ports
  uint64_t events = 0;
  double wall_s = 0;
  TimeNs last_end = 0;
};

class Experiment {
 public:
  explicit Experiment(const ExperimentConfig& cfg);
  ~Experiment();

  int hosts() const { return static_cast<int>(endpoints_.size()); }
  Fabric& fabric() { return fabric_; }
  const Topology& topology() const { return topo_; }
  TimeNs base_rtt_ns() const { return fabric::base_rtt_ns(cfg_.topo, cfg_.profile); }

  // Flows are added before run(). Flows between the same two hosts share
  // one connection (their WRITEs follow each other on it).
  void add_flow(const FlowSpec& f);
  // Records, every `period` of virtual time, the bytes each flow has had
  // placed at its receiver and the queue of each of `ports`.
  // With watch_entropies, each sample also holds every entropy of the
  // watched flows' sending connections: its counters, state, and the
  // egress ports its frames take at that moment (Fabric::trace).
  struct EntropySample {
    uint32_t flow;
    uint16_t index, udp_src_port;
    uint8_t state;  // PathState
    uint32_t sent, acked, ecn_marked, lost;
    uint32_t srtt_ns;
    std::vector<int> ports;
  };
  struct Sample {
    TimeNs at;
    std::vector<uint64_t> flow_bytes;
    std::vector<uint64_t> queue_bytes;
    std::vector<EntropySample> entropies;
  };
  void sample_every(TimeNs period, std::vector<int> ports);
  void watch_entropies(std::vector<size_t> flows) { entropy_flows_ = std::move(flows); }
  const std::vector<Sample>& samples() const { return samples_; }
  // Runs until every flow has completed (or failed) or `until` passes.
  // Returns whether all completed.
  bool run(TimeNs until);
  const std::vector<FlowResult>& results() const { return results_; }
  Summary summarize(double wall_s) const;

 private:
  struct HostState {
    std::unique_ptr<CompletionQueue> scq, rcq;
    uint16_t next_id = 1;
    uint32_t src_key = 0, dst_key = 0;  // shared scratch regions
  };
  // One connection pair per pair of hosts and qp that exchange flows (per
  // pair of hosts with Profile::pdc_per_peer: then each qp is a queue pair
  // on it, in slot order, its connection's own first).
  struct Pair {
    int src = 0, dst = 0;
    ConnectionConfig src_cfg, dst_cfg;
    Connection* sender = nullptr;
    Connection* receiver = nullptr;
    std::vector<uint16_t> qps;                        // the flows' qp of each slot
    std::vector<std::pair<uint32_t, uint32_t>> qpns;  // slots 1..: (src's, dst's) QP numbers
  };
  // Request packets of flow i's queue pair its receiver has taken.
  uint64_t received(size_t i) const;
  void on_activity(int host);
  void start_flow(size_t i);
  void set_up_flows();
  void take_sample();
  void sample_chain();
  void flush_dependents(size_t failed);

  ExperimentConfig cfg_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  Fabric fabric_;
  Topology topo_;
  std::vector<HostState> state_;
  std::vector<FlowResult> results_;
  std::vector<Pair> pairs_;
  std::unordered_map<uint64_t, int> pair_index_;  // (src, dst, qp or 0) -> pair
  std::vector<int> pair_of_;                      // per flow
  std::vector<uint16_t> slot_of_;                 // per flow: its queue pair's slot
  std::vector<std::vector<size_t>> dependents_;   // per flow: flows waiting for it
  std::vector<uint64_t> placed_at_start_;         // per flow: received(i) then
  std::vector<uint64_t> ecn_at_start_;            // per flow: its pair's ECN-marked count then
  std::vector<std::vector<uint8_t>> src_mem_, dst_mem_;  // per flow with verify
  std::vector<uint8_t> scratch_src_, scratch_dst_;
  TimeNs sample_period_ = 0;
  std::vector<int> sample_ports_;
  std::vector<size_t> entropy_flows_;
  std::vector<Sample> samples_;
  bool set_up_ = false;
  bool final_sampled_ = false;
  size_t open_flows_ = 0;
};

// Flow sets.
// Each host sends to one other, every host receives from one (a random
// derangement of the hosts).
std::vector<FlowSpec> permutation(int hosts, uint64_t bytes, uint64_t seed);
// `senders` hosts (spread over the fabric, never the receiver) to one.
std::vector<FlowSpec> incast(int hosts, int senders, int receiver, uint64_t bytes);
// Every host to every other.
std::vector<FlowSpec> all_to_all(int hosts, uint64_t bytes);
// Background load: flows of `bytes` between uniformly random pairs of
// distinct hosts, arriving as a Poisson process during [0, duration) at the
// rate that offers `load` (a fraction) of every host's `gbps` of link rate
// on average. Deterministic for a seed.
std::vector<FlowSpec> poisson_load(int hosts, double load, double gbps, uint64_t bytes,
                                   TimeNs duration, uint64_t seed);
// Ring allreduce of `bytes` over `ranks` hosts (0..ranks-1): 2 (ranks - 1)
// steps in which every rank writes bytes/ranks to the next; a rank's step
// starts when its predecessor's previous step has reached it.
std::vector<FlowSpec> ring_allreduce(int ranks, uint64_t bytes);
// Halving-doubling allreduce (ranks a power of two): log2(ranks) steps of
// recursive halving (reduce-scatter: bytes/2, /4, ... to the partner at
// distance ranks/2, /4, ...), then the same steps in reverse (allgather).
// A rank's step starts when its partner's previous step has reached it.
std::vector<FlowSpec> halving_doubling_allreduce(int ranks, uint64_t bytes);

}  // namespace braid::fabric

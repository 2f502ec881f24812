// What congestion control is configured with and fed: the algorithm's
// settings and the events of ACKs and losses (congestion_control.h).
#pragma once

#include <cstdint>

#include "core/path_set.h"
#include "core/types.h"

namespace braid {

// An algorithm's place in the registry (cc/registry.h): any number below
// kCcAlgorithmCount (congestion_control.h) is one. Those code picks by
// name are named here; cc_algorithm_named() finds any by its name.
enum class CcAlgorithm : uint8_t {
  kFixedWindow,  // window_bytes in flight, never changed (cc/fixed.h)
  kNscc,         // UET's network-signal CC: ECN and delay (cc/nscc.h)
  kDcqcn,        // RoCEv2's: a paced rate cut by CNPs (cc/dcqcn.h)
};

// DCQCN's parameters (the paper's, facts.md).
struct DcqcnConfig {
  double g = 1.0 / 256;
  TimeNs alpha_timer_ns = 55'000;      // alpha decays each period without a CNP
  TimeNs rate_timer_ns = 50'000;       // an increase event each period
  uint64_t byte_counter = 10'000'000;  // ... and each this many bytes
  uint32_t fast_recovery_stages = 5;   // F
  double rai_fraction = 0.001;         // R_AI as a fraction of the link
  double hai_factor = 10;              // R_HAI = hai_factor x R_AI
  TimeNs cnp_interval_ns = 50'000;     // the receiver's: at most one CNP per this
  bool operator==(const DcqcnConfig&) const = default;
};

struct CcConfig {
  CcAlgorithm algorithm = CcAlgorithm::kFixedWindow;
  uint32_t window_bytes = 1024 * 1024;  // fixed window; NSCC's initial window is its maximum
  uint64_t pacing_rate_bps = 0;         // fixed window: 0 = not paced
  // What NSCC scales itself by: the network's base RTT (0: the smallest RTT
  // measured so far) and the rate of the host's link.
  TimeNs base_rtt_ns = 0;
  uint64_t link_bps = 100'000'000'000;
  // The network trims instead of dropping: a lower delay target.
  bool trimming = true;
  // NSCC's largest window follows the smallest RTT the flow measures (1.5 x
  // link rate x that RTT), as UEC's simulator has it: a flow nearer than the
  // network's base RTT gets its own BDP, not the network's. Off, a configured
  // base RTT fixes it: on a software datapath the RTT under load is many
  // times the smallest (the hosts' turnaround), and the smallest's window
  // starves it.
  bool max_window_from_measured_rtt = false;
  DcqcnConfig dcqcn;
  // Receiver-driven credit (credit.h), on top of the algorithm above: data
  // goes only with credit the receiver granted, or from a speculative
  // allowance after an idle spell (0: one BDP, base_rtt_ns x link_bps;
  // 64 KiB when the base RTT is not configured).
  bool credit = false;
  uint32_t credit_speculative_bytes = 0;
  // The receiver's side (whatever `credit` says: it answers who asks): the
  // most it grants a peer beyond the credited data that arrived from it.
  // At least two BDPs (link_bps x base_rtt_ns). A dead peer, or one that
  // asks and does not send, takes that much of the link's turns, then one
  // cap per rto_max_ns at most (forgiven when it asks again, after a wait
  // that doubles); a peer whose credited data still arrives is forgiven at
  // once.
  uint32_t credit_unused_cap_bytes = 1u << 20;

  bool operator==(const CcConfig&) const = default;
  // The link's bytes in one base RTT (0 when the base RTT is not set).
  uint64_t bdp_bytes() const { return link_bps / 8 * base_rtt_ns / 1'000'000'000ull; }
};

// What one ACK says.
struct AckEvent {
  TimeNs now = 0;
  uint32_t acked_bytes =
      0;  // newly acknowledged, as the window counts them (payload + header charge)
  uint32_t acked_packets = 0;
  uint64_t rtt_ns = 0;  // of the packet that triggered it, when sent once (0: no sample)
  // What this sample says of the base RTT: rtt_ns when the receiver held
  // the ACK for a small part of the round trip, else the whole round trip
  // (a hold that long measured on the receiver's clock is not what the
  // wire took off: subtracted, it gave 0.6 us through two routers).
  uint64_t base_sample_ns = 0;
  bool ecn = false;             // that packet arrived with ECN-CE
  uint32_t inflight_bytes = 0;  // after this ACK
  uint8_t entropy = 0;          // of that packet
};

struct LossEvent {
  TimeNs now = 0;
  uint32_t lost_bytes = 0;  // as the window counts them: payload and header charge
  LossKind kind = LossKind::kInferred;
  uint8_t entropy = 0;
  uint32_t inflight_bytes = 0;  // after taking the packet out
};

}  // namespace braid

// The congestion-control algorithms a connection may run, each in a file of
// this folder (docs/congestion.md, "Adding a congestion algorithm"). An
// algorithm is a class with:
//   static constexpr std::string_view kName;  // how configurations name it
//   Algo(const CcConfig&, uint32_t packet_bytes);
//   void on_ack(const AckEvent&); void on_loss(const LossEvent&);
//   uint32_t cwnd_bytes() const; uint64_t rate_bps() const;  // 0: not paced
// and, where it needs them, on_sent(bytes, now) (paced frames leaving),
// on_cnp(now) (a CNP from the receiver) and on_spurious_timeout().
// Its number is its place in this list (CcAlgorithm; the C API's enum
// braid_cc is that plus one), its name is kName: both are found from here
// by every configuration (verbs, libibverbs, perftest, the simulators).
#pragma once

#include <variant>

#include "core/cc/dcqcn.h"
#include "core/cc/fixed.h"
#include "core/cc/nscc.h"

namespace braid {

// Register an algorithm here, at the end (the numbers of the others are ABI).
using CcAlgorithms = std::variant<FixedWindowCc, NsccCc, DcqcnCc>;

}  // namespace braid

// The path policies a connection may use to choose each packet's entropy,
// each in a file of this folder (docs/congestion.md, "Adding a path
// policy"). A policy is a class with:
//   static constexpr std::string_view kName;  // how configurations name it
//   static constexpr bool kAdaptive;  // keeps path states (PathSet's probes)
//   explicit Policy(const EntropyConfig&);
//   choose(set, now), choose_retransmit(set, previous, now): an entropy;
//   on_named(set, i, marked), on_lost(set, i, why, now), on_set_aside(i),
//   on_delivered(set, i, marked): what comes back on entropy i;
//   passes_over(set, i), passing_any(set): whether exploring skips i.
// `set` is the connection's PathSet, which keeps what every policy shares
// (entropies, statistics, path sequences, path states and probes, the mark
// rate) and offers next_in_turn() and explore(). Its number is its place in
// this list (PathPolicy; the C API's enum braid_path_policy is that plus
// one), its name is kName.
#pragma once

#include <variant>

#include "core/paths/bitmap.h"
#include "core/paths/reps.h"
#include "core/paths/round_robin.h"

namespace braid {

// Register a policy here, at the end (the numbers of the others are ABI).
using PathPolicies = std::variant<RoundRobinPaths, RepsPaths, BitmapPaths>;

}  // namespace braid

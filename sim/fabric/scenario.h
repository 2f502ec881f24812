// Scenario text for the fabric simulator: sizes ("2M"), flows ("src dst
// bytes [start_us [after [qp]]]", one per line in a file) and link events
// ("at_us kind link [value]"), parsed and applied to an Experiment. Bad
// text throws ScenarioError naming the option it came from.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fabric/workload.h"

namespace braid::fabric {

struct ScenarioError : std::invalid_argument {
  ScenarioError(const std::string& option, const std::string& why)
      : std::invalid_argument(option + ": " + why) {}
};

// A size with an optional K, M or G suffix (powers of 1024).
uint64_t parse_size(const std::string& s);
// One flow "src dst bytes [start_us [after [qp]]]" into f; false for a
// blank line. `where` names it in errors.
bool parse_flow(const std::string& text, FlowSpec& f, const std::string& where);
// Flows from a file, one per line ('#' starts a comment).
std::vector<FlowSpec> read_flows(const std::string& path);

// A link event: "at_us kind link [value]".
//   kind: down, up, rate (value: fraction of the link's configured rate),
//         loss (value: the fraction of frames silently dropped, default 1);
//   link: core:I (the I-th top-tier link, both directions; core:I:up or
//         core:I:down for one), host:H (host H's link to its edge switch,
//         both directions; host:H:in or host:H:out for one).
struct LinkEvent {
  double at_us = 0;
  std::string kind;
  std::string link;
  double value = 1.0;
};
LinkEvent parse_event(const std::string& text);
// The fabric ports (egress, one per direction) of an event's link.
std::vector<int> ports_of_link(const std::string& link, Experiment& x);
// Applies each event at its time (at once for time 0); `gbps` is the
// links' configured rate.
void schedule_events(const std::vector<LinkEvent>& events, double gbps, Experiment& x);

}  // namespace braid::fabric

#include "fabric/scenario.h"

#include <fstream>
#include <functional>
#include <sstream>

namespace braid::fabric {

uint64_t parse_size(const std::string& s) {
  size_t used = 0;
  const double v = std::stod(s, &used);
  uint64_t mult = 1;
  if (used < s.size()) {
    switch (s[used]) {
      case 'k':
      case 'K':
        mult = 1024;
        break;
      case 'm':
      case 'M':
        mult = 1024 * 1024;
        break;
      case 'g':
      case 'G':
        mult = 1024ull * 1024 * 1024;
        break;
      default:
        throw ScenarioError("--size", "use a number with K, M or G: " + s);
    }
  }
  return static_cast<uint64_t>(v * static_cast<double>(mult));
}

bool parse_flow(const std::string& text, FlowSpec& f, const std::string& where) {
  std::istringstream ss(text.substr(0, text.find('#')));
  f = FlowSpec{};
  std::string size, extra;
  if (!(ss >> f.src)) {
    if (ss.eof()) return false;  // blank or comment
    throw ScenarioError("--flow", where + ": want src dst bytes [start_us [after [qp]]]");
  }
  if (!(ss >> f.dst >> size)) {
    throw ScenarioError("--flow", where + ": want src dst bytes [start_us [after [qp]]]");
  }
  f.bytes = parse_size(size);
  double start_us = 0;
  if (ss >> start_us) {
    if (start_us < 0) throw ScenarioError("--flow", where + ": negative start");
    f.start = static_cast<TimeNs>(start_us * 1000);
    if (!(ss >> f.after) && !ss.eof()) {
      throw ScenarioError("--flow", where + ": 'after' is a flow's index");
    }
    int qp = 0;
    if (ss >> qp) {
      if (qp < 0 || qp > 0xffff) throw ScenarioError("--flow", where + ": qp is 0..65535");
      f.qp = static_cast<uint16_t>(qp);
    } else if (!ss.eof()) {
      throw ScenarioError("--flow", where + ": qp is a number");
    }
  } else if (!ss.eof()) {
    throw ScenarioError("--flow", where + ": start is in microseconds");
  }
  if (ss >> extra) throw ScenarioError("--flow", where + ": unexpected '" + extra + "'");
  return true;
}

// Flows from a file: "src dst bytes [start_us [after [qp]]]" per line.
std::vector<FlowSpec> read_flows(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ScenarioError("--flows", "cannot read " + path);
  std::vector<FlowSpec> flows;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    FlowSpec f;
    if (parse_flow(line, f, path + ":" + std::to_string(n))) flows.push_back(f);
  }
  return flows;
}

LinkEvent parse_event(const std::string& text) {
  std::istringstream ss(text);
  LinkEvent e;
  std::string extra;
  if (!(ss >> e.at_us >> e.kind >> e.link) || e.at_us < 0) {
    throw ScenarioError("--event", "'" + text + "': want at_us kind link [value]");
  }
  const bool valued = static_cast<bool>(ss >> e.value);
  if (!valued && !ss.eof()) {
    throw ScenarioError("--event", "'" + text + "': the value is a number");
  }
  if (ss >> extra) throw ScenarioError("--event", "'" + text + "': unexpected " + extra);
  if (e.kind == "rate") {
    if (!valued || e.value <= 0 || e.value > 1) {
      throw ScenarioError("--event", "'" + text + "': rate wants a fraction in (0, 1]");
    }
  } else if (e.kind == "loss") {
    if (e.value < 0 || e.value > 1) {
      throw ScenarioError("--event", "'" + text + "': loss wants a fraction in [0, 1]");
    }
  } else if (e.kind != "down" && e.kind != "up") {
    throw ScenarioError("--event", "'" + text + "': kind is down, up, rate or loss");
  }
  return e;
}

// The fabric ports (egress, one per direction) of an event's link.
std::vector<int> ports_of_link(const std::string& link, Experiment& x) {
  const Fabric& f = x.fabric();
  const Topology& t = x.topology();
  const auto bad = [&](const std::string& why) {
    return ScenarioError("--event", "link '" + link + "': " + why);
  };
  const size_t colon = link.find(':');
  if (colon == std::string::npos) throw bad("want core:I or host:H");
  const std::string what = link.substr(0, colon);
  std::string rest = link.substr(colon + 1), dir;
  if (const size_t c2 = rest.find(':'); c2 != std::string::npos) {
    dir = rest.substr(c2 + 1);
    rest = rest.substr(0, c2);
  }
  size_t used = 0;
  long i = -1;
  try {
    i = std::stol(rest, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != rest.size() || i < 0) throw bad("the index is a number");
  std::vector<int> ports;
  if (what == "core") {
    if (i >= static_cast<long>(t.core_links.size())) {
      throw bad("the fabric has " + std::to_string(t.core_links.size()) + " top-tier links");
    }
    const int up = t.core_links[i];  // the lower switch's egress; +1 is the way down
    if (dir.empty() || dir == "up") ports.push_back(up);
    if (dir.empty() || dir == "down") ports.push_back(up + 1);
  } else if (what == "host") {
    if (i >= x.hosts()) throw bad("the fabric has " + std::to_string(x.hosts()) + " hosts");
    const int h = static_cast<int>(i);
    if (dir.empty() || dir == "in")
      ports.push_back(f.port_between(t.host_edge[h], f.node_of_host(h)));
    if (dir.empty() || dir == "out")
      ports.push_back(f.port_between(f.node_of_host(h), t.host_edge[h]));
  } else {
    throw bad("want core:I or host:H");
  }
  if (ports.empty()) throw bad("the direction is up or down (core), in or out (host)");
  return ports;
}

void schedule_events(const std::vector<LinkEvent>& events, double gbps, Experiment& x) {
  Fabric& f = x.fabric();
  for (const LinkEvent& e : events) {
    const std::vector<int> ports = ports_of_link(e.link, x);
    std::function<void()> apply = [&f, ports, e, gbps] {
      for (int port : ports) {
        if (e.kind == "down" || e.kind == "up") f.set_port_up(port, e.kind == "up");
        if (e.kind == "rate") f.set_port_rate(port, gbps * e.value);
        if (e.kind == "loss") f.set_port_loss(port, e.value);
      }
    };
    if (e.at_us == 0) {
      apply();
    } else {
      f.at(static_cast<TimeNs>(e.at_us * 1000), std::move(apply));
    }
  }
}

}  // namespace braid::fabric

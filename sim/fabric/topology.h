// Topologies for the fabric: a two-tier leaf-spine and a three-tier k-ary
// fat tree, built from hosts the caller made.
#pragma once

#include <string>
#include <vector>

#include "fabric/fabric.h"

namespace braid::fabric {

struct TopologyConfig {
  enum class Kind { kLeafSpine, kFatTree };
  Kind kind = Kind::kFatTree;
  // Fat tree: k pods of k/2 edge and k/2 aggregation switches, (k/2)^2 core
  // switches; k/2 hosts per edge switch times `oversubscription`.
  int k = 8;
  // Leaf-spine: every leaf linked once to every spine; hosts_per_leaf hosts.
  int leaves = 4, spines = 4, hosts_per_leaf = 8;
  double oversubscription = 1.0;
  // Parallel planes: the switches are built this many times and every host
  // has a NIC port on each (a frame takes the plane its entropy hashes to).
  int planes = 1;
  LinkSpec host_link{100.0, 1000};
  LinkSpec fabric_link{100.0, 1000};
  SwitchConfig sw;

  int hosts() const;
  std::string describe() const;
};

struct Topology {
  std::vector<int> edges;  // leaf / edge switches (node ids)
  std::vector<int> aggs;   // fat tree aggregation switches
  std::vector<int> cores;  // spines / core switches
  // The switch-to-switch links of the top tier (agg-core, leaf-spine) as
  // the egress port of the lower switch: the links failure scenarios cut.
  std::vector<int> core_links;
  std::vector<int> host_edge;  // each host's edge switch (in plane 0)
};

// Adds the switches and links to `f` for hosts 0..cfg.hosts()-1 (already
// added to f, in order) and builds the routes.
Topology build_topology(Fabric& f, const TopologyConfig& cfg);

}  // namespace braid::fabric

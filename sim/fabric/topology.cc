#include "fabric/topology.h"

#include <cmath>
#include <stdexcept>

namespace braid::fabric {
namespace {

int hosts_per_edge(const TopologyConfig& c) {
  const int base = c.kind == TopologyConfig::Kind::kFatTree ? c.k / 2 : c.hosts_per_leaf;
  return std::max(1, static_cast<int>(std::lround(base * c.oversubscription)));
}

}  // namespace

int TopologyConfig::hosts() const {
  if (kind == Kind::kFatTree) return k * (k / 2) * hosts_per_edge(*this);
  return leaves * hosts_per_edge(*this);
}

std::string TopologyConfig::describe() const {
  const std::string rate = std::to_string(static_cast<int>(host_link.gbps)) + "G";
  const std::string planes_text =
      planes > 1 ? ", " + std::to_string(planes) + " planes" : std::string();
  if (kind == Kind::kFatTree) {
    return "fat tree k=" + std::to_string(k) + ", " + std::to_string(hosts()) + " hosts, " + rate +
           planes_text;
  }
  return "leaf-spine " + std::to_string(leaves) + "x" + std::to_string(spines) + ", " +
         std::to_string(hosts()) + " hosts, " + rate + planes_text;
}

Topology build_topology(Fabric& f, const TopologyConfig& c) {
  if (f.host_count() != c.hosts()) {
    throw std::invalid_argument("the fabric has " + std::to_string(f.host_count()) +
                                " hosts; the topology wants " + std::to_string(c.hosts()));
  }
  Topology t;
  const int per_edge = hosts_per_edge(c);
  if (c.planes < 1) throw std::invalid_argument("at least one plane");
  if (c.kind == TopologyConfig::Kind::kFatTree && (c.k < 2 || c.k % 2 != 0)) {
    throw std::invalid_argument("a fat tree needs an even k >= 2");
  }
  for (int plane = 0; plane < c.planes; ++plane) {
    std::vector<int> edges, cores;
    if (c.kind == TopologyConfig::Kind::kLeafSpine) {
      for (int i = 0; i < c.spines; ++i) cores.push_back(f.add_switch(c.sw));
      for (int l = 0; l < c.leaves; ++l) {
        const int leaf = f.add_switch(c.sw);
        edges.push_back(leaf);
        for (int s : cores) t.core_links.push_back(f.connect(leaf, s, c.fabric_link));
      }
    } else {
      const int half = c.k / 2;
      for (int i = 0; i < half * half; ++i) cores.push_back(f.add_switch(c.sw));
      for (int pod = 0; pod < c.k; ++pod) {
        std::vector<int> pod_aggs;
        for (int j = 0; j < half; ++j) {
          const int agg = f.add_switch(c.sw);
          pod_aggs.push_back(agg);
          t.aggs.push_back(agg);
          for (int m = 0; m < half; ++m) {
            t.core_links.push_back(f.connect(agg, cores[j * half + m], c.fabric_link));
          }
        }
        for (int e = 0; e < half; ++e) {
          const int edge = f.add_switch(c.sw);
          edges.push_back(edge);
          for (int agg : pod_aggs) f.connect(edge, agg, c.fabric_link);
        }
      }
    }
    for (int h = 0; h < f.host_count(); ++h) {
      const int edge = edges[h / per_edge];
      f.connect(f.node_of_host(h), edge, c.host_link);
      if (plane == 0) t.host_edge.push_back(edge);
    }
    t.edges.insert(t.edges.end(), edges.begin(), edges.end());
    t.cores.insert(t.cores.end(), cores.begin(), cores.end());
  }
  f.build_routes();
  return t;
}

}  // namespace braid::fabric

#include "core/congestion_control.h"

namespace braid {

namespace {
CongestionControl::Algorithms make(const CcConfig& cfg, uint32_t packet_bytes) {
  switch (cfg.algorithm) {
    case CcAlgorithm::kNscc:
      return NsccCc(cfg, packet_bytes);
    case CcAlgorithm::kDcqcn:
      return DcqcnCc(cfg);
    case CcAlgorithm::kFixedWindow:
      break;
  }
  return FixedWindowCc(cfg);
}
}  // namespace

CongestionControl::CongestionControl(const CcConfig& cfg, uint32_t packet_bytes)
    : algo_(make(cfg, packet_bytes)), algorithm_(cfg.algorithm) {
  sync();
}

}  // namespace braid

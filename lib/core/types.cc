#include "core/types.h"

namespace braid {

const char* wc_status_name(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocLenErr:
      return "local length error";
    case WcStatus::kLocQpOpErr:
      return "local QP operation error";
    case WcStatus::kLocProtErr:
      return "local protection error";
    case WcStatus::kWrFlushErr:
      return "Work Request Flushed Error";
    case WcStatus::kBadRespErr:
      return "bad response error";
    case WcStatus::kRemInvReqErr:
      return "remote invalid request error";
    case WcStatus::kRemAccessErr:
      return "remote access error";
    case WcStatus::kRemOpErr:
      return "remote operation error";
    case WcStatus::kRetryExcErr:
      return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExcErr:
      return "RNR retry counter exceeded";
    case WcStatus::kGeneralErr:
      return "general error";
  }
  return "?";
}

}  // namespace braid

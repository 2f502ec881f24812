// Basic vocabulary of the protocol core: time, PSN arithmetic, operations and
// work completions with libibverbs' numbering, so the verbs layer maps 1:1.
#pragma once

#include <cstdint>

namespace braid {

// Nanoseconds from an arbitrary origin. The core never reads a clock: every
// entry point is handed `now` by its caller (the engine or the simulator).
using TimeNs = uint64_t;
inline constexpr TimeNs kNever = ~TimeNs{0};

// 32-bit PSNs compare in serial-number arithmetic (RFC 1982).
inline int32_t psn_diff(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b);
}
inline bool psn_lt(uint32_t a, uint32_t b) {
  return psn_diff(a, b) < 0;
}
inline bool psn_le(uint32_t a, uint32_t b) {
  return psn_diff(a, b) <= 0;
}

enum class Opcode : uint8_t {
  kWrite,
  kWriteImm,
  kSend,
  kSendImm,
  kRead,
  // 8-byte atomics on the peer's memory; the old value comes back into
  // the request's local buffer (SendRequest::set_atomic_operands).
  kAtomicFetchAdd,
  kAtomicCmpSwap,
};

// Requests answered with data (the requester waits for it, within
// max_rd_atomic): READs and atomics.
// (One compare each: the opcodes are in this order.)
inline bool answered_with_data(Opcode op) {
  return op >= Opcode::kRead;
}
inline bool is_atomic(Opcode op) {
  return op >= Opcode::kAtomicFetchAdd;
}
static_assert(Opcode::kAtomicFetchAdd > Opcode::kRead && Opcode::kAtomicCmpSwap > Opcode::kRead &&
              Opcode::kWrite < Opcode::kRead && Opcode::kWriteImm < Opcode::kRead &&
              Opcode::kSend < Opcode::kRead && Opcode::kSendImm < Opcode::kRead);

// Values of enum ibv_wc_status.
enum class WcStatus : uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kBadRespErr = 7,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kGeneralErr = 21,
};

// Values of enum ibv_wc_opcode.
enum class WcOpcode : uint8_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kCompSwap = 3,
  kFetchAdd = 4,
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};

const char* wc_status_name(WcStatus s);

// Why a post was refused.
enum class PostError : uint8_t { kOk, kQueueFull, kInvalid, kConnectionError };

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  bool has_imm = false;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;  // host order
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;  // UD receives: the sender's QP
  bool grh = false;     // UD receives: a GRH precedes the data
};

}  // namespace braid

// UET semantic sublayer (SES) headers as Braid uses them for RDMA operations:
// the 44-byte standard request (SOM and non-SOM forms), the 12-byte response
// and the 20-byte response with data. docs/wire-format.md maps each field to
// its Braid meaning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "wire/byte_order.h"

namespace braid::wire {

enum class SesOpcode : uint8_t {
  kNoOp = 0x00,
  kWrite = 0x01,
  kRead = 0x02,
  kAtomic = 0x03,
  kFetchAtomic = 0x04,
  kSend = 0x05,
  kRendezvousSend = 0x06,
  kDatagramSend = 0x07,
  kDeferrableSend = 0x08,
  kTaggedSend = 0x09,
};

enum class SesResponseOpcode : uint8_t {
  kDefault = 0x00,
  kResponse = 0x01,
  kResponseWithData = 0x02,
  kNoResponse = 0x03,
};

// SES return codes Braid uses (UET numbering).
inline constexpr uint8_t kSesRcOk = 0x01;
inline constexpr uint8_t kSesRcPermViolation = 0x17;
inline constexpr uint8_t kSesRcBadMkey = 0x1c;
inline constexpr uint8_t kSesRcBadAddr = 0x1d;

// Flags of byte 1 of a request (bits 5..0; bits 7..6 are the version).
inline constexpr uint8_t kSesFlagSom = 0x01;
inline constexpr uint8_t kSesFlagEom = 0x02;
inline constexpr uint8_t kSesFlagHd = 0x04;   // header data present (immediate)
inline constexpr uint8_t kSesFlagRel = 0x08;  // relative addressing
inline constexpr uint8_t kSesFlagIe = 0x10;   // initiator error
inline constexpr uint8_t kSesFlagDc = 0x20;   // delivery complete

inline constexpr size_t kSesStandardSize = 44;
inline constexpr size_t kSesResponseSize = 12;
inline constexpr size_t kSesResponseDataSize = 20;

struct SesRequest {
  uint8_t opcode = 0;   // 6 bits
  uint8_t version = 0;  // 2 bits
  uint8_t flags = 0;    // kSesFlag*
  uint16_t message_id = 0;
  uint8_t ri_generation = 0;
  uint32_t job_id = 0;          // 24 bits
  uint16_t pid_on_fep = 0;      // 12 bits
  uint16_t resource_index = 0;  // 12 bits
  uint64_t buffer_offset = 0;
  uint32_t initiator = 0;
  uint64_t memory_key = 0;  // memory key or match bits
  // With SOM: header_data. Without SOM: payload_length (14 bits) and
  // message_offset share the same 8 bytes.
  uint64_t header_data = 0;
  uint16_t payload_length = 0;
  uint32_t message_offset = 0;
  uint32_t request_length = 0;

  bool som() const { return flags & kSesFlagSom; }
  bool eom() const { return flags & kSesFlagEom; }
};

struct SesResponse {
  uint8_t list = 0;         // 2 bits
  uint8_t opcode = 0;       // 6 bits (SesResponseOpcode)
  uint8_t version = 0;      // 2 bits
  uint8_t return_code = 0;  // 6 bits
  uint16_t message_id = 0;
  uint8_t ri_generation = 0;             // plain response only
  uint32_t job_id = 0;                   // 24 bits
  uint16_t read_request_message_id = 0;  // with data only
  uint16_t payload_length = 0;           // with data only, 14 bits
  uint32_t modified_length = 0;
  uint32_t message_offset = 0;  // with data only
};

size_t decode_ses_response(const uint8_t* p, size_t len, SesResponse* h);
size_t encode_ses_response(uint8_t* p, const SesResponse& h);
size_t decode_ses_response_data(const uint8_t* p, size_t len, SesResponse* h);
size_t encode_ses_response_data(uint8_t* p, const SesResponse& h);

// Bytes 0..11 are common to every standard request form.
inline void decode_ses_request_common(const uint8_t* p, SesRequest* h) {
  h->opcode = p[0] & 0x3f;
  h->version = p[1] >> 6;
  h->flags = p[1] & 0x3f;
  h->message_id = load_be16(p + 2);
  // Two words instead of five loads: ri_generation and the 24-bit job id,
  // then the two 12-bit names of the queue pair.
  const uint32_t job = load_be32(p + 4);
  h->ri_generation = static_cast<uint8_t>(job >> 24);
  h->job_id = job & 0xffffff;
  const uint32_t names = load_be32(p + 8);
  h->pid_on_fep = (names >> 16) & 0xfff;
  h->resource_index = names & 0xfff;
}

inline size_t decode_ses_request(const uint8_t* p, size_t len, SesRequest* h) {
  if (len < kSesStandardSize) return 0;
  decode_ses_request_common(p, h);
  h->buffer_offset = load_be64(p + 12);
  h->initiator = load_be32(p + 20);
  h->memory_key = load_be64(p + 24);
  if (h->som()) {
    h->header_data = load_be64(p + 32);
    h->payload_length = 0;
    h->message_offset = 0;
  } else {
    h->header_data = 0;
    h->payload_length = load_be16(p + 34) & 0x3fff;
    h->message_offset = load_be32(p + 36);
  }
  h->request_length = load_be32(p + 40);
  return kSesStandardSize;
}

inline size_t encode_ses_request(uint8_t* p, const SesRequest& h) {
  p[0] = h.opcode & 0x3f;
  p[1] = static_cast<uint8_t>((h.version << 6) | (h.flags & 0x3f));
  store_be16(p + 2, h.message_id);
  store_be32(p + 4, (uint32_t{h.ri_generation} << 24) | (h.job_id & 0xffffff));
  store_be32(p + 8, (uint32_t{h.pid_on_fep & 0xfffu} << 16) | (h.resource_index & 0xfffu));
  store_be64(p + 12, h.buffer_offset);
  store_be32(p + 20, h.initiator);
  store_be64(p + 24, h.memory_key);
  if (h.som()) {
    store_be64(p + 32, h.header_data);
  } else {
    store_be32(p + 32, h.payload_length & 0x3fff);
    store_be32(p + 36, h.message_offset);
  }
  store_be32(p + 40, h.request_length);
  return kSesStandardSize;
}

// An atomic (opcode kFetchAtomic: it returns the target's old value)
// carries UET's atomic extension header after the SES header: the atomic
// code, the datatype, semantic control (bit 7 cacheable, bit 6 coherent
// with the CPU) and a reserved byte. A compare-and-swap's compare and swap
// values follow it in 16-byte fields (UET's compare-and-swap extension
// header); another atomic's operand is its payload. Braid carries SUM and
// CSWAP on UINT64 (InfiniBand's FETCH_AND_ADD and CMP_AND_SWP): a 64-bit
// value sits big-endian in the first 8 bytes of its field, the rest zero
// (docs/wire-format.md). The request length is the target's size (8).
inline constexpr size_t kSesAtomicHeaderSize = 4;
inline constexpr uint8_t kSesAtomicSum = 0x02;
inline constexpr uint8_t kSesAtomicCompareSwap = 0x0d;
inline constexpr uint8_t kSesAtomicUint64 = 0x07;
inline constexpr uint8_t kSesAtomicCpuCoherent = 0x40;

struct SesAtomic {
  uint8_t code = 0;
  uint8_t datatype = kSesAtomicUint64;
  uint8_t control = kSesAtomicCpuCoherent;
  uint64_t operand = 0;  // the addend, or the value swapped in
  uint64_t compare = 0;  // compare-and-swap only
};

// The payload bytes of an atomic of this code that Braid carries (0: none).
inline size_t ses_atomic_size(uint8_t code) {
  return code == kSesAtomicSum           ? kSesAtomicHeaderSize + 8
         : code == kSesAtomicCompareSwap ? kSesAtomicHeaderSize + 32
                                         : 0;
}

inline size_t encode_ses_atomic(uint8_t* p, const SesAtomic& a) {
  const size_t n = ses_atomic_size(a.code);
  std::memset(p, 0, n);
  p[0] = a.code;
  p[1] = a.datatype;
  p[2] = a.control;
  if (a.code == kSesAtomicCompareSwap) {
    store_be64(p + kSesAtomicHeaderSize, a.compare);
    store_be64(p + kSesAtomicHeaderSize + 16, a.operand);
  } else {
    store_be64(p + kSesAtomicHeaderSize, a.operand);
  }
  return n;
}

// 0 unless the payload is exactly one atomic Braid carries (its reserved
// bytes, and a 64-bit value's unused field bytes, zero).
inline size_t decode_ses_atomic(const uint8_t* p, size_t len, SesAtomic* a) {
  if (len < kSesAtomicHeaderSize) return 0;
  a->code = p[0];
  a->datatype = p[1];
  a->control = p[2];
  if (p[3] != 0 || a->datatype != kSesAtomicUint64 || ses_atomic_size(a->code) != len) return 0;
  const uint8_t* v = p + kSesAtomicHeaderSize;
  if (a->code == kSesAtomicCompareSwap) {
    for (size_t i = 8; i < 16; ++i) {
      if (v[i] != 0 || v[16 + i] != 0) return 0;
    }
    a->compare = load_be64(v);
    a->operand = load_be64(v + 16);
  } else {
    a->compare = 0;
    a->operand = load_be64(v);
  }
  return len;
}

}  // namespace braid::wire

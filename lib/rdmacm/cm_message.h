// The connection management messages Braid's librdmacm exchanges, carried in
// UD datagrams to QP 1 of the peer's device (docs/wire-format.md,
// "Connection management"): InfiniBand CM's exchange (REQ, REP, RTU, REJ,
// MRA, DREQ, DREP) in a layout of Braid's own. Pure: encode and decode,
// nothing else, so every byte a stranger can send is checked here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::cm {

// Q_Key of QP 1 (InfiniBand's GSI Q_Key).
inline constexpr uint32_t kQkey = 0x80010000;
inline constexpr uint32_t kQpNum = 1;
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderSize = 40;
inline constexpr size_t kMaxPrivate = 224;  // DREP/RTU's; the largest of any type
inline constexpr size_t kMaxMessage = kHeaderSize + kMaxPrivate;

enum class Type : uint8_t {
  kReq = 1,   // connect: the client's QP, PSN, resources, private data
  kRep = 2,   // accept: the server's QP, PSN, resources, private data
  kRtu = 3,   // ready to use: the client is connected
  kRej = 4,   // reject (reason), or no such service
  kMra = 5,   // message received, answer delayed: the client waits longer
  kDreq = 6,  // disconnect request
  kDrep = 7,  // disconnect reply
};

// InfiniBand CM's reject reasons that Braid sends (the RDMA_CM_EVENT_REJECTED
// status librdmacm programs see).
inline constexpr uint16_t kRejectNoListener = 8;  // IB_CM_REJ_INVALID_SERVICE_ID
inline constexpr uint16_t kRejectConsumer = 28;   // IB_CM_REJ_CONSUMER_DEFINED
inline constexpr uint16_t kRejectStale = 10;      // IB_CM_REJ_STALE_CONN

// The most private data each type carries (InfiniBand CM's field sizes less
// the 36 bytes rdma_cm puts in a REQ's; what librdmacm programs may send).
size_t max_private(Type t);

struct Message {
  Type type = Type::kReq;
  uint16_t reason = 0;              // REJ
  uint32_t local_id = 0;            // the sender's id for the connection (never 0)
  uint32_t remote_id = 0;           // the receiver's (0 in a REQ, and a REJ withdrawing one)
  uint16_t port_space = 0;          // RDMA_PS_TCP, _UDP, _IB (REQ)
  uint16_t src_port = 0;            // the client's port (REQ)
  uint16_t dst_port = 0;            // the service's port (REQ)
  uint32_t qp_num = 0;              // REQ, REP: the sender's QP (24 bits)
  uint32_t psn = 0;                 // REQ, REP: the sender's first send PSN (24 bits)
  uint8_t responder_resources = 0;  // REQ, REP
  uint8_t initiator_depth = 0;      // REQ, REP
  uint8_t retry_count = 0;          // REQ (3 bits)
  uint8_t rnr_retry_count = 0;      // REQ, REP (3 bits)
  uint8_t flow_control = 0;         // REQ, REP
  uint8_t srq = 0;                  // REQ, REP
  uint8_t qp_type = 0;              // REQ: IBV_QPT_RC (2) or IBV_QPT_UD (4)
  uint32_t src_ip = 0;              // the sender's address (host order)
  uint8_t private_len = 0;
  uint8_t private_data[kMaxPrivate] = {};
};

// Writes the message to out (room for kMaxMessage); returns its length, 0 if
// the message is not one that may be sent (private data too long for its
// type, QP number or PSN beyond 24 bits).
size_t encode(const Message& m, uint8_t* out);

enum class DecodeError {
  kNone,
  kShort,       // shorter than the header, or than its private data
  kVersion,     // not version 1
  kType,        // unknown type
  kPrivateLen,  // more private data than the type carries
  kField,       // a field out of range (24-bit QPN/PSN, local id 0, ...)
};
const char* to_string(DecodeError e);

// Reads a message of `len` bytes (bytes past the message are ignored: a
// datagram may be padded). Never reads past `len`.
DecodeError decode(const uint8_t* in, size_t len, Message* out);

}  // namespace braid::cm

// Braid's CM messages (lib/rdmacm/cm_message.h): what encodes, what decodes
// back the same, and every way a stranger's bytes are refused.
#include "rdmacm/cm_message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace braid::cm {
namespace {

Message request() {
  Message m;
  m.type = Type::kReq;
  m.local_id = 0x01020304;
  m.port_space = 0x0106;
  m.src_port = 40000;
  m.dst_port = 7471;
  m.qp_num = 0xabcdef;
  m.psn = 0x123456;
  m.responder_resources = 1;
  m.initiator_depth = 2;
  m.retry_count = 7;
  m.rnr_retry_count = 6;
  m.flow_control = 1;
  m.srq = 1;
  m.qp_type = 2;
  m.src_ip = 0xc6120002;
  m.private_len = 56;
  for (int i = 0; i < 56; ++i) m.private_data[i] = static_cast<uint8_t>(i * 3);
  return m;
}

TEST(CmMessage, ARequestDecodesAsItWasEncoded) {
  const Message m = request();
  uint8_t buf[kMaxMessage];
  const size_t n = encode(m, buf);
  ASSERT_EQ(n, kHeaderSize + 56);
  Message d;
  ASSERT_EQ(decode(buf, n, &d), DecodeError::kNone);
  EXPECT_EQ(d.type, Type::kReq);
  EXPECT_EQ(d.local_id, m.local_id);
  EXPECT_EQ(d.remote_id, 0u);
  EXPECT_EQ(d.port_space, m.port_space);
  EXPECT_EQ(d.src_port, m.src_port);
  EXPECT_EQ(d.dst_port, m.dst_port);
  EXPECT_EQ(d.qp_num, m.qp_num);
  EXPECT_EQ(d.psn, m.psn);
  EXPECT_EQ(d.responder_resources, 1);
  EXPECT_EQ(d.initiator_depth, 2);
  EXPECT_EQ(d.retry_count, 7);
  EXPECT_EQ(d.rnr_retry_count, 6);
  EXPECT_EQ(d.flow_control, 1);
  EXPECT_EQ(d.srq, 1);
  EXPECT_EQ(d.qp_type, 2);
  EXPECT_EQ(d.src_ip, m.src_ip);
  ASSERT_EQ(d.private_len, 56);
  EXPECT_EQ(std::memcmp(d.private_data, m.private_data, 56), 0);
  // Network byte order, where docs/wire-format.md puts each field.
  EXPECT_EQ(buf[0], kVersion);
  EXPECT_EQ(buf[1], 1);
  EXPECT_EQ(buf[4], 0x01);
  EXPECT_EQ(buf[7], 0x04);
  EXPECT_EQ(buf[16], 7471 >> 8);
  EXPECT_EQ(buf[21], 0xab);
  EXPECT_EQ(buf[36], 0xc6);
}

TEST(CmMessage, EachTypeCarriesAtMostItsPrivateData) {
  for (Type t :
       {Type::kReq, Type::kRep, Type::kRtu, Type::kRej, Type::kMra, Type::kDreq, Type::kDrep}) {
    Message m = request();
    m.type = t;
    m.remote_id = t == Type::kReq ? 0 : 9;
    m.private_len = static_cast<uint8_t>(max_private(t));
    uint8_t buf[kMaxMessage];
    const size_t n = encode(m, buf);
    ASSERT_EQ(n, kHeaderSize + max_private(t)) << static_cast<int>(t);
    Message d;
    EXPECT_EQ(decode(buf, n, &d), DecodeError::kNone) << static_cast<int>(t);
    m.private_len = static_cast<uint8_t>(max_private(t) + 1);
    EXPECT_EQ(encode(m, buf), 0u) << static_cast<int>(t);
  }
  EXPECT_EQ(max_private(Type::kReq), 56u);
  EXPECT_EQ(max_private(Type::kRep), 196u);
  EXPECT_EQ(max_private(Type::kRej), 148u);
}

TEST(CmMessage, WhatCannotBeSentIsNotEncoded) {
  uint8_t buf[kMaxMessage];
  Message m = request();
  m.qp_num = 1u << 24;
  EXPECT_EQ(encode(m, buf), 0u);
  m = request();
  m.psn = 1u << 24;
  EXPECT_EQ(encode(m, buf), 0u);
  m = request();
  m.local_id = 0;
  EXPECT_EQ(encode(m, buf), 0u);
  m = request();
  m.rnr_retry_count = 8;
  EXPECT_EQ(encode(m, buf), 0u);
}

TEST(CmMessage, MalformedBytesAreRefusedWithTheirReason) {
  uint8_t good[kMaxMessage];
  const size_t n = encode(request(), good);
  ASSERT_GT(n, 0u);
  Message d;
  // Short: every length below the header, and below its private data.
  for (size_t len = 0; len < n; ++len) {
    EXPECT_EQ(decode(good, len, &d), DecodeError::kShort) << len;
  }
  // Padding after the message is ignored.
  std::vector<uint8_t> padded(good, good + n);
  padded.resize(n + 100, 0xee);
  EXPECT_EQ(decode(padded.data(), padded.size(), &d), DecodeError::kNone);
  auto with = [&](size_t at, uint8_t v) {
    std::vector<uint8_t> b(good, good + n);
    b[at] = v;
    return decode(b.data(), b.size(), &d);
  };
  EXPECT_EQ(with(0, 2), DecodeError::kVersion);
  EXPECT_EQ(with(1, 0), DecodeError::kType);
  EXPECT_EQ(with(1, 8), DecodeError::kType);
  EXPECT_EQ(with(18, 57), DecodeError::kPrivateLen);  // a REQ carries 56 at most
  EXPECT_EQ(with(20, 1), DecodeError::kField);        // QP number past 24 bits
  EXPECT_EQ(with(24, 1), DecodeError::kField);        // PSN past 24 bits
  EXPECT_EQ(with(30, 8), DecodeError::kField);        // retry count past 3 bits
  EXPECT_EQ(with(31, 9), DecodeError::kField);        // RNR retry count past 3 bits
  EXPECT_EQ(with(32, 4), DecodeError::kField);        // unknown flag
  EXPECT_EQ(with(11, 1), DecodeError::kField);        // a REQ naming the receiver's id
  std::vector<uint8_t> b(good, good + n);
  std::memset(b.data() + 4, 0, 4);  // local id 0
  EXPECT_EQ(decode(b.data(), b.size(), &d), DecodeError::kField);
  // Any other type must name the receiver's id.
  Message rep = request();
  rep.type = Type::kRep;
  rep.remote_id = 0;
  uint8_t r[kMaxMessage];
  const size_t rn = encode(rep, r);
  ASSERT_GT(rn, 0u);
  EXPECT_EQ(decode(r, rn, &d), DecodeError::kField);
}

}  // namespace
}  // namespace braid::cm

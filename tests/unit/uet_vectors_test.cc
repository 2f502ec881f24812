// Braid's wire codecs against UET packets built by an independent
// implementation (tests/data/uet-vectors/README.md): every packet of the two
// pcaps goes through decode_frame, every header through its per-header
// decoder, every manifest field with a Braid counterpart is compared, and
// every header form Braid can encode must re-encode to the manifest's bytes.
//
// Field-name mapping (generator name -> Braid), each one pinned by the bytes:
//   requests   retrans -> kReqFlagRetx (0x10), ackreq -> kReqFlagAckReq (0x08),
//              use_rsv_pdc -> pdc_info bit 3 (0x8; see UseRsvPdcBit below)
//   ACK        ecn_marked -> kAckFlagEcn (0x20), retrans -> kAckFlagRetx,
//              probe -> kAckFlagProbe, request -> (flags >> kAckReqShift) & 3,
//              ack_psn_offset_probe_opaque -> ack_psn_offset,
//              ccx_type -> cc_type, ack_cc_state -> ccx_state
//   NACK       nak_type -> kNackFlagType (0x08), nak_code -> nack_code,
//              nak_psn_pkt_id -> nack_psn, nccx_ccx_state1/2 -> nccx_state1/2
//   CTRL       ctl_type -> prologue next_hdr, rsvd_isrod -> flag 0x20,
//              ack_req -> kReqFlagAckReq
//   SES        delivery_complete/initiator_error/relative_addressing/
//              hdr_data_present/end_of_msg/start_of_msg -> kSesFlagDc/Ie/Rel/
//              Hd/Eom/Som, memory_key_match_bits/match_bits -> memory_key
// docs/wire-format.md records where these vectors, Braid and UEC's reference
// provider (uet_pkt_hdr.h) differ.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "wire/byte_order.h"
#include "wire/frame.h"
#include "wire/pds.h"
#include "wire/ses.h"

#ifndef BRAID_TEST_DATA_DIR
#error "BRAID_TEST_DATA_DIR must be defined (the repository's tests/data directory)"
#endif

namespace braid::wire {
namespace {

using Bytes = std::vector<uint8_t>;

std::string data_path(std::string_view name) {
  return std::string(BRAID_TEST_DATA_DIR) + "/uet-vectors/" + std::string(name);
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<uint8_t> exact_copy(const uint8_t* p, size_t n) {
  return std::vector<uint8_t>(p, p + n);  // capacity == size: ASan sees over-reads
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 0xf];
  }
  return s;
}

Bytes from_hex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw std::runtime_error("bad hex digit");
  };
  if (hex.size() % 2 != 0) throw std::runtime_error("odd hex length");
  Bytes out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>((nibble(hex[2 * i]) << 4) | nibble(hex[2 * i + 1]));
  }
  return out;
}

// ---------------------------------------------------------------------------
// A minimal JSON reader, enough for the manifests: objects, arrays, strings
// (ASCII escapes), unsigned integers kept as text so 64-bit values stay exact,
// true/false/null.

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;               // number literal or string value
  std::vector<Json> items;        // array elements
  std::vector<std::string> keys;  // object members: keys[i] names values[i]
  std::vector<Json> values;

  const Json* find(std::string_view key) const;
  const Json& at(std::string_view key) const;
  uint64_t u64() const {
    if (kind != Kind::kNumber || text.empty()) throw std::runtime_error("not a number");
    uint64_t v = 0;
    for (char c : text) {
      if (c < '0' || c > '9') throw std::runtime_error("not an unsigned integer: " + text);
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) throw std::runtime_error("integer overflow: " + text);
      v = v * 10 + d;
    }
    return v;
  }
  const std::string& str() const {
    if (kind != Kind::kString) throw std::runtime_error("not a string");
    return text;
  }
};

const Json* Json::find(std::string_view key) const {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &values[i];
  }
  return nullptr;
}

const Json& Json::at(std::string_view key) const {
  const Json* v = find(key);
  if (v == nullptr) throw std::runtime_error("missing key " + std::string(key));
  return *v;
}

class JsonParser {
 public:
  explicit JsonParser(std::string_view s) : s_(s) {}

  Json parse_document() {
    Json v = parse_value();
    skip_ws();
    if (pos_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(pos_));
  }
  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) {
      ++pos_;
    }
  }
  char peek() {
    skip_ws();
    if (pos_ >= s_.size()) fail("unexpected end");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool consume_literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  Json parse_value() {
    const char c = peek();
    Json v;
    if (c == '{') {
      v.kind = Json::Kind::kObject;
      ++pos_;
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        std::string key = parse_string();
        expect(':');
        v.keys.push_back(std::move(key));
        v.values.push_back(parse_value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::kArray;
      ++pos_;
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        v.items.push_back(parse_value());
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::kString;
      v.text = parse_string();
      return v;
    }
    if (consume_literal("true")) {
      v.kind = Json::Kind::kBool;
      v.boolean = true;
      return v;
    }
    if (consume_literal("false")) {
      v.kind = Json::Kind::kBool;
      return v;
    }
    if (consume_literal("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = Json::Kind::kNumber;
      const size_t start = pos_;
      while (pos_ < s_.size() &&
             std::string_view("+-0123456789.eE").find(s_[pos_]) != std::string_view::npos) {
        ++pos_;
      }
      v.text = std::string(s_.substr(start, pos_ - start));
      return v;
    }
    fail("unexpected character");
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("bad escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          if (pos_ + 4 > s_.size()) fail("bad \\u escape");
          const unsigned cp =
              static_cast<unsigned>(std::stoul(std::string(s_.substr(pos_, 4)), nullptr, 16));
          pos_ += 4;
          if (cp > 0x7f) fail("non-ASCII \\u escape");
          out += static_cast<char>(cp);
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------
// Classic libpcap files (not pcapng), either byte order, us or ns timestamps.

struct Pcap {
  uint32_t linktype = 0;
  std::vector<Bytes> packets;
};

Pcap read_pcap(const std::string& path) {
  const Bytes f = read_file(path);
  if (f.size() < 24) throw std::runtime_error(path + ": shorter than a pcap header");
  const uint32_t magic_le =
      uint32_t{f[0]} | uint32_t{f[1]} << 8 | uint32_t{f[2]} << 16 | uint32_t{f[3]} << 24;
  bool big_endian;
  if (magic_le == 0xa1b2c3d4 || magic_le == 0xa1b23c4d) {
    big_endian = false;
  } else if (magic_le == 0xd4c3b2a1 || magic_le == 0x4d3cb2a1) {
    big_endian = true;
  } else {
    throw std::runtime_error(path + ": not a classic pcap file");
  }
  auto u32 = [&](size_t off) -> uint32_t {
    if (big_endian) return load_be32(f.data() + off);
    return uint32_t{f[off]} | uint32_t{f[off + 1]} << 8 | uint32_t{f[off + 2]} << 16 |
           uint32_t{f[off + 3]} << 24;
  };
  Pcap out;
  out.linktype = u32(20);
  size_t off = 24;
  while (off < f.size()) {
    if (f.size() - off < 16) throw std::runtime_error(path + ": truncated record header");
    const uint32_t incl = u32(off + 8);
    const uint32_t orig = u32(off + 12);
    off += 16;
    if (incl > f.size() - off) throw std::runtime_error(path + ": truncated record");
    if (incl != orig) throw std::runtime_error(path + ": packet cut by the snap length");
    out.packets.emplace_back(f.begin() + static_cast<std::ptrdiff_t>(off),
                             f.begin() + static_cast<std::ptrdiff_t>(off + incl));
    off += incl;
  }
  return out;
}

// ---------------------------------------------------------------------------
// The two vector sets.

struct VectorSet {
  std::string name;
  Json manifest;
  Pcap pcap;
};

const std::vector<VectorSet>& vector_sets() {
  static const std::vector<VectorSet> sets = [] {
    std::vector<VectorSet> v;
    for (const char* m : {"uet_pds.manifest.json", "uet_ses.manifest.json"}) {
      VectorSet s;
      s.name = m;
      const Bytes text = read_file(data_path(m));
      s.manifest =
          JsonParser(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()))
              .parse_document();
      s.pcap = read_pcap(data_path(s.manifest.at("pcap").str()));
      v.push_back(std::move(s));
    }
    return v;
  }();
  return sets;
}

// The UDP payload of an untagged Ethernet/IPv4/UDP frame, found independently
// of decode_frame.
Bytes udp_payload_of(const Bytes& frame) {
  if (frame.size() < kEthernetSize + kIpv4Size || load_be16(frame.data() + 12) != 0x0800) {
    throw std::runtime_error("not an Ethernet/IPv4 frame");
  }
  const size_t ihl = size_t{frame[kEthernetSize] & 0xfu} * 4;
  const size_t udp = kEthernetSize + ihl;
  if (frame.size() < udp + kUdpSize) throw std::runtime_error("no UDP header");
  const size_t udp_len = load_be16(frame.data() + udp + 4);
  if (udp_len < kUdpSize || frame.size() < udp + udp_len) throw std::runtime_error("bad UDP len");
  return Bytes(frame.begin() + static_cast<std::ptrdiff_t>(udp + kUdpSize),
               frame.begin() + static_cast<std::ptrdiff_t>(udp + udp_len));
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}
bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// ---------------------------------------------------------------------------
// Field checks. Every manifest field must either map to a Braid value or be
// listed, with the reason, as having no counterpart.

struct FieldMap {
  std::map<std::string, std::function<uint64_t()>> get;
  std::map<std::string, std::string> no_counterpart;
  // Generator inputs wider than their wire field: compare the low bits only.
  std::map<std::string, uint64_t> mask;
};

void check_fields(const Json& fields, const FieldMap& m) {
  for (size_t i = 0; i < fields.keys.size(); ++i) {
    const std::string& name = fields.keys[i];
    const Json& value = fields.values[i];
    if (m.no_counterpart.count(name) != 0) continue;
    const auto it = m.get.find(name);
    if (it == m.get.end()) {
      ADD_FAILURE() << "manifest field '" << name << "' is neither mapped nor excluded";
      continue;
    }
    uint64_t want = value.u64();
    if (const auto mk = m.mask.find(name); mk != m.mask.end()) want &= mk->second;
    EXPECT_EQ(it->second(), want) << "field " << name;
  }
}

uint64_t bit(uint8_t flags, uint8_t mask) {
  return (flags & mask) != 0 ? 1 : 0;
}

// Flags the generator did not set explicitly are zero in every vector; a
// decoder that put a named flag at the wrong position would show up here.
void expect_only_known_flags(uint8_t flags, uint8_t known) {
  EXPECT_EQ(flags & ~known & 0x7f, 0)
      << "unexpected prologue flag bits 0x" << std::hex << int{flags};
}

constexpr uint8_t kCtrlFlagIsRod = 0x20;  // no Braid constant: Braid never sends ROD

struct HeaderCheck {
  size_t consumed = 0;     // what Braid's decoder consumed (0: no decoder)
  bool encodable = false;  // Braid can encode this form
  Bytes reencoded;
};

template <typename H, typename Dec>
size_t decode_exact(Dec dec, const Bytes& bytes, H* h) {
  auto copy = exact_copy(bytes.data(), bytes.size());
  return dec(copy.data(), bytes.size(), h);
}

HeaderCheck check_request(const std::string& builder, const Json& fields, const Bytes& bytes) {
  RequestHeader h;
  HeaderCheck r;
  r.consumed = decode_exact(decode_request, bytes, &h);
  const bool cc = contains(builder, "Cc");
  const bool syn = contains(builder, "Syn");
  const bool rod = starts_with(builder, "MakeRod");
  const PdsType type = rod ? (cc ? PdsType::kRodCcReq : PdsType::kRodReq)
                           : (cc ? PdsType::kRudCcReq : PdsType::kRudReq);
  EXPECT_EQ(h.pro.type, static_cast<uint8_t>(type));
  EXPECT_EQ(bit(h.pro.flags, kReqFlagSyn), syn ? 1u : 0u);
  expect_only_known_flags(h.pro.flags, kReqFlagRetx | kReqFlagAckReq | kReqFlagSyn);
  FieldMap m;
  m.get["next_hdr"] = [&] { return h.pro.next_hdr; };
  m.get["retrans"] = [&] { return bit(h.pro.flags, kReqFlagRetx); };
  m.get["ackreq"] = [&] { return bit(h.pro.flags, kReqFlagAckReq); };
  m.get["clear_psn_offset"] = [&] { return h.clear_psn_offset; };
  m.get["psn"] = [&] { return h.psn; };
  m.get["spdcid"] = [&] { return h.spdcid; };
  m.get["dpdcid"] = [&] { return h.dpdcid; };
  // The vectors put use_rsv_pdc in the top bit of the 4-bit pdc_info.
  m.get["use_rsv_pdc"] = [&] { return (h.pdc_info >> 3) & 1u; };
  m.get["psn_offset"] = [&] { return h.psn_offset; };
  m.get["ccc_id"] = [&] { return h.ccc_id; };
  m.get["credit_target"] = [&] { return h.credit_target; };
  check_fields(fields, m);
  r.encodable = true;
  r.reencoded.resize(kRequestCcSize);
  r.reencoded.resize(encode_request(r.reencoded.data(), h));
  return r;
}

HeaderCheck check_ack(const std::string& builder, const Json& fields, const Bytes& bytes) {
  AckHeader h;
  HeaderCheck r;
  r.consumed = decode_exact(decode_ack, bytes, &h);
  PdsType type = PdsType::kAck;
  if (builder == "MakeAckCcNscc" || builder == "MakeAckCcCredit") type = PdsType::kAckCc;
  if (builder == "MakeAckCcx") type = PdsType::kAckCcx;
  EXPECT_EQ(h.pro.type, static_cast<uint8_t>(type));
  EXPECT_EQ(h.has_sack, type != PdsType::kAck);
  if (builder == "MakeAckCcNscc") {
    EXPECT_EQ(h.cc_type, static_cast<uint8_t>(CcType::kNscc));
  }
  if (builder == "MakeAckCcCredit") {
    EXPECT_EQ(h.cc_type, static_cast<uint8_t>(CcType::kCredit));
  }
  expect_only_known_flags(h.pro.flags,
                          kAckFlagEcn | kAckFlagRetx | kAckFlagProbe | (3 << kAckReqShift));
  FieldMap m;
  m.get["next_hdr"] = [&] { return h.pro.next_hdr; };
  m.get["ecn_marked"] = [&] { return bit(h.pro.flags, kAckFlagEcn); };
  m.get["retrans"] = [&] { return bit(h.pro.flags, kAckFlagRetx); };
  m.get["probe"] = [&] { return bit(h.pro.flags, kAckFlagProbe); };
  m.get["request"] = [&] { return (h.pro.flags >> kAckReqShift) & 3u; };
  m.get["cack_psn"] = [&] { return h.cack_psn; };
  m.get["ack_psn_offset_probe_opaque"] = [&] { return h.ack_psn_offset; };
  m.get["spdcid"] = [&] { return h.spdcid; };
  m.get["dpdcid"] = [&] { return h.dpdcid; };
  m.get["cc_flags"] = [&] { return h.cc_flags; };
  m.get["mpr"] = [&] { return h.mpr; };
  m.get["sack_psn_offset"] = [&] { return h.sack_psn_offset; };
  m.get["sack_bitmap"] = [&] { return h.sack_bitmap; };
  m.get["service_time"] = [&] { return h.nscc.service_time; };
  m.get["restore_cwnd"] = [&] { return h.nscc.restore_cwnd ? 1u : 0u; };
  m.get["rcv_cwnd_pend"] = [&] { return h.nscc.rcv_cwnd_pend; };
  m.get["rcvd_bytes"] = [&] { return h.nscc.rcvd_bytes; };
  m.get["ooo_count"] = [&] { return h.nscc.ooo_count; };
  m.get["credit"] = [&] { return h.credit; };
  m.get["ccx_type"] = [&] { return h.cc_type; };
  m.get["ack_cc_state"] = [&] { return h.ccx_state; };
  check_fields(fields, m);
  r.encodable = true;
  r.reencoded.resize(kAckCcSize);
  r.reencoded.resize(encode_ack(r.reencoded.data(), h));
  return r;
}

HeaderCheck check_nack(const std::string& builder, const Json& fields, const Bytes& bytes) {
  NackHeader h;
  HeaderCheck r;
  r.consumed = decode_exact(decode_nack, bytes, &h);
  const bool ccx = builder == "MakeNackCcx";
  EXPECT_EQ(h.pro.type, static_cast<uint8_t>(ccx ? PdsType::kNackCcx : PdsType::kNack));
  EXPECT_EQ(h.has_ccx, ccx);
  expect_only_known_flags(h.pro.flags, kAckFlagEcn | kAckFlagRetx | kNackFlagType);
  FieldMap m;
  m.get["next_hdr"] = [&] { return h.pro.next_hdr; };
  m.get["ecn_marked"] = [&] { return bit(h.pro.flags, kAckFlagEcn); };  // same M bit as ACK
  m.get["retrans"] = [&] { return bit(h.pro.flags, kAckFlagRetx); };
  m.get["nak_type"] = [&] { return bit(h.pro.flags, kNackFlagType); };
  m.get["nak_code"] = [&] { return h.nack_code; };
  m.get["vendor_code"] = [&] { return h.vendor_code; };
  m.get["nak_psn_pkt_id"] = [&] { return h.nack_psn; };
  m.get["spdcid"] = [&] { return h.spdcid; };
  m.get["dpdcid"] = [&] { return h.dpdcid; };
  m.get["payload"] = [&] { return h.payload; };
  m.get["nccx_type"] = [&] { return h.nccx_type; };
  m.get["nccx_ccx_state1"] = [&] { return h.nccx_state1; };
  m.get["nccx_ccx_state2"] = [&] { return h.nccx_state2; };
  // The generator's field is 56 bits wide; its test pattern 0x0edcba9876543210
  // is wider, and only the low 56 bits reach the wire.
  m.mask["nccx_ccx_state2"] = 0x00ffffffffffffffULL;
  check_fields(fields, m);
  r.encodable = true;
  r.reencoded.resize(kNackCcxSize);
  r.reencoded.resize(encode_nack(r.reencoded.data(), h));
  return r;
}

HeaderCheck check_ctrl(const std::string& builder, const Json& fields, const Bytes& bytes) {
  CtrlHeader h;
  HeaderCheck r;
  r.consumed = decode_exact(decode_ctrl, bytes, &h);
  const bool syn = builder == "MakeControlPktSyn";
  EXPECT_EQ(h.pro.type, static_cast<uint8_t>(PdsType::kCtrl));
  EXPECT_EQ(bit(h.pro.flags, kReqFlagSyn), syn ? 1u : 0u);
  expect_only_known_flags(h.pro.flags,
                          kCtrlFlagIsRod | kReqFlagRetx | kReqFlagAckReq | kReqFlagSyn);
  FieldMap m;
  m.get["ctl_type"] = [&] { return h.pro.next_hdr; };
  m.get["rsvd_isrod"] = [&] { return bit(h.pro.flags, kCtrlFlagIsRod); };
  m.get["retrans"] = [&] { return bit(h.pro.flags, kReqFlagRetx); };
  m.get["ack_req"] = [&] { return bit(h.pro.flags, kReqFlagAckReq); };
  m.get["probe_opaque"] = [&] { return h.probe_opaque; };
  m.get["psn"] = [&] { return h.psn; };
  m.get["spdcid"] = [&] { return h.spdcid; };
  m.get["dpdcid"] = [&] { return h.dpdcid; };
  m.get["use_rsv_pdc"] = [&] { return (h.pdc_info >> 3) & 1u; };
  m.get["psn_offset"] = [&] { return h.psn_offset; };
  check_fields(fields, m);
  r.encodable = true;
  r.reencoded.resize(kCtrlSize);
  r.reencoded.resize(encode_ctrl(r.reencoded.data(), h));
  return r;
}

HeaderCheck check_unreliable(const std::string& builder, const Json& fields, const Bytes& bytes) {
  UnreliableHeader h;
  HeaderCheck r;
  r.consumed = decode_exact(decode_unreliable, bytes, &h);
  PdsType type = PdsType::kUudReq;
  if (builder == "MakeRudiRequest") type = PdsType::kRudiReq;
  if (builder == "MakeRudiResponse") type = PdsType::kRudiResp;
  EXPECT_EQ(h.pro.type, static_cast<uint8_t>(type));
  // RUDI flags: M 0x20 and RETX 0x10, the same positions as in ACK/NACK.
  expect_only_known_flags(h.pro.flags, kAckFlagEcn | kAckFlagRetx);
  FieldMap m;
  m.get["next_hdr"] = [&] { return h.pro.next_hdr; };
  m.get["ecn_marked"] = [&] { return bit(h.pro.flags, kAckFlagEcn); };
  m.get["retrans"] = [&] { return bit(h.pro.flags, kAckFlagRetx); };
  m.get["pkt_id"] = [&] { return h.pkt_id; };
  check_fields(fields, m);
  r.encodable = false;  // Braid never sends RUDI or UUD, so it has no encoder for them
  return r;
}

HeaderCheck check_ses_request(const std::string& builder, const Json& fields, const Bytes& bytes) {
  SesRequest h;
  HeaderCheck r;
  r.consumed = decode_exact(decode_ses_request, bytes, &h);
  EXPECT_EQ(h.version, 0);
  const bool defer = builder == "MakeDeferSendHdrStd";
  const bool rtr = builder == "MakeReadyToRestartHdrStd";
  if (builder == "MakeRequestSomHdrStd") {
    EXPECT_TRUE(h.som());
  }
  if (builder == "MakeRequestNoSomHdrStd") {
    EXPECT_FALSE(h.som());
  }
  FieldMap m;
  m.get["opcode"] = [&] { return h.opcode; };
  m.get["delivery_complete"] = [&] { return bit(h.flags, kSesFlagDc); };
  m.get["initiator_error"] = [&] { return bit(h.flags, kSesFlagIe); };
  m.get["relative_addressing"] = [&] { return bit(h.flags, kSesFlagRel); };
  m.get["hdr_data_present"] = [&] { return bit(h.flags, kSesFlagHd); };
  m.get["end_of_msg"] = [&] { return bit(h.flags, kSesFlagEom); };
  m.get["start_of_msg"] = [&] { return bit(h.flags, kSesFlagSom); };
  m.get["message_id"] = [&] { return h.message_id; };
  m.get["ri_generation"] = [&] { return h.ri_generation; };
  m.get["job_id"] = [&] { return h.job_id; };
  m.get["pid_on_fep"] = [&] { return h.pid_on_fep; };
  m.get["resource_index"] = [&] { return h.resource_index; };
  m.get["buffer_offset"] = [&] { return h.buffer_offset; };
  m.get["initiator"] = [&] { return h.initiator; };
  m.get["memory_key_match_bits"] = [&] { return h.memory_key; };
  m.get["match_bits"] = [&] { return h.memory_key; };
  m.get["header_data"] = [&] { return h.header_data; };
  m.get["payload_length"] = [&] { return h.payload_length; };
  m.get["message_offset"] = [&] { return h.message_offset; };
  m.get["request_length"] = [&] { return h.request_length; };
  if (defer || rtr) {
    // Deferrable send (8) and ready-to-restart (12) put two 32-bit restart
    // tokens where Braid reads buffer_offset (defer) or memory_key (RTR).
    // Braid uses neither opcode; the tokens are checked where they land.
    const uint64_t* tokens = defer ? &h.buffer_offset : &h.memory_key;
    m.get["initiator_restart_token"] = [tokens] { return *tokens >> 32; };
    m.get["target_restart_token"] = [tokens] { return *tokens & 0xffffffffu; };
    // With SOM clear Braid reads bytes 32..39 as payload_length and
    // message_offset, which these builders fill with header_data.
    m.no_counterpart["header_data"] = "non-SOM form: header_data is not decoded";
  }
  check_fields(fields, m);
  // Braid's non-SOM encoder zeroes the reserved bits of bytes 32..35, which
  // the defer/RTR vectors fill with header_data: only the forms Braid sends
  // are expected to re-encode byte for byte.
  r.encodable = !defer && !rtr;
  r.reencoded.resize(kSesStandardSize);
  r.reencoded.resize(encode_ses_request(r.reencoded.data(), h));
  return r;
}

HeaderCheck check_ses_response(const std::string& builder, const Json& fields, const Bytes& bytes) {
  SesResponse h;
  HeaderCheck r;
  const bool with_data = builder == "MakeWithDataHdrResponse";
  r.consumed = with_data ? decode_exact(decode_ses_response_data, bytes, &h)
                         : decode_exact(decode_ses_response, bytes, &h);
  EXPECT_EQ(h.version, 0);
  FieldMap m;
  m.get["list"] = [&] { return h.list; };
  m.get["opcode"] = [&] { return h.opcode; };
  m.get["return_code"] = [&] { return h.return_code; };
  m.get["message_id"] = [&] { return h.message_id; };
  m.get["ri_generation"] = [&] { return h.ri_generation; };
  m.get["job_id"] = [&] { return h.job_id; };
  m.get["modified_length"] = [&] { return h.modified_length; };
  m.get["read_request_message_id"] = [&] { return h.read_request_message_id; };
  m.get["payload_length"] = [&] { return h.payload_length; };
  m.get["message_offset"] = [&] { return h.message_offset; };
  check_fields(fields, m);
  r.encodable = true;
  r.reencoded.resize(kSesResponseDataSize);
  r.reencoded.resize(with_data ? encode_ses_response_data(r.reencoded.data(), h)
                               : encode_ses_response(r.reencoded.data(), h));
  return r;
}

// SES headers Braid has no decoder for (decode_frame drops them as
// kUnknownNextHeader by design).
const std::set<std::string> kSesWithoutBraidDecoder = {
    "MakeRequestHdrMedium", "MakeRequestHdrSmall", "MakeWithDataHdrSmallResponse"};

HeaderCheck check_header(const Json& header, const Bytes& bytes) {
  const std::string layer = header.at("layer").str();
  const std::string builder = header.at("builder").str();
  const Json& fields = header.at("fields");
  if (layer == "uet_pds") {
    if (starts_with(builder, "MakeRudRequest") || starts_with(builder, "MakeRodRequest")) {
      return check_request(builder, fields, bytes);
    }
    if (starts_with(builder, "MakeAck")) return check_ack(builder, fields, bytes);
    if (starts_with(builder, "MakeNack")) return check_nack(builder, fields, bytes);
    if (starts_with(builder, "MakeControlPkt")) return check_ctrl(builder, fields, bytes);
    if (builder == "MakeUudReq" || starts_with(builder, "MakeRudi")) {
      return check_unreliable(builder, fields, bytes);
    }
  } else if (layer == "uet_ses") {
    if (contains(builder, "HdrStd")) return check_ses_request(builder, fields, bytes);
    if (builder == "MakeHdrResponse" || builder == "MakeWithDataHdrResponse") {
      return check_ses_response(builder, fields, bytes);
    }
    if (kSesWithoutBraidDecoder.count(builder) != 0) return HeaderCheck{};
  }
  ADD_FAILURE() << "no check for " << layer << "." << builder
                << ": a new vector form needs a mapping here";
  return HeaderCheck{};
}

struct PacketView {
  const VectorSet* set;
  const Json* entry;
  const Bytes* frame;
};

std::vector<PacketView> all_packets() {
  std::vector<PacketView> v;
  for (const auto& s : vector_sets()) {
    for (const auto& e : s.manifest.at("packets").items) {
      const uint64_t idx = e.at("index").u64();
      if (idx >= s.pcap.packets.size()) throw std::runtime_error("index beyond the pcap");
      v.push_back({&s, &e, &s.pcap.packets[idx]});
    }
  }
  return v;
}

std::string trace_name(const PacketView& p) {
  std::ostringstream o;
  o << p.set->name << " packet " << p.entry->at("index").u64();
  return o.str();
}

// ---------------------------------------------------------------------------

TEST(UetVectors, PcapsMatchManifests) {
  ASSERT_NO_THROW(vector_sets());
  ASSERT_EQ(vector_sets().size(), 2u);
  // README.md: 19 PDS packets and 17 SES packets.
  EXPECT_EQ(vector_sets()[0].pcap.packets.size(), 19u);
  EXPECT_EQ(vector_sets()[1].pcap.packets.size(), 17u);
  for (const auto& s : vector_sets()) {
    SCOPED_TRACE(s.name);
    EXPECT_EQ(s.pcap.linktype, 1u);  // Ethernet
    const auto& packets = s.manifest.at("packets").items;
    EXPECT_EQ(packets.size(), s.pcap.packets.size());
    std::set<uint64_t> seen;
    for (const auto& e : packets) EXPECT_TRUE(seen.insert(e.at("index").u64()).second);
  }
  for (const auto& p : all_packets()) {
    SCOPED_TRACE(trace_name(p));
    const Bytes udp = udp_payload_of(*p.frame);
    EXPECT_EQ(load_be16(p.frame->data() + kEthernetSize + kIpv4Size + 2),
              p.set->manifest.at("udp_dport").u64());
    std::string hex;
    for (const auto& h : p.entry->at("headers").items) hex += h.at("hex").str();
    // Some packets carry more after the listed headers (atomic extension
    // headers and operands): that is payload to Braid.
    ASSERT_LE(hex.size(), 2 * udp.size());
    EXPECT_EQ(to_hex(udp.data(), hex.size() / 2), hex);
  }
}

TEST(UetVectors, EveryHeaderDecodesAndReencodes) {
  ASSERT_NO_THROW(all_packets());
  int encodable = 0;
  int checked = 0;
  for (const auto& p : all_packets()) {
    const Bytes udp = udp_payload_of(*p.frame);
    size_t off = 0;
    for (const auto& header : p.entry->at("headers").items) {
      SCOPED_TRACE(trace_name(p) + " " + header.at("builder").str());
      const Bytes want = from_hex(header.at("hex").str());
      ASSERT_LE(off + want.size(), udp.size());
      // Decode the captured bytes, not the manifest's copy of them.
      const Bytes got(udp.begin() + static_cast<std::ptrdiff_t>(off),
                      udp.begin() + static_cast<std::ptrdiff_t>(off + want.size()));
      const HeaderCheck r = check_header(header, got);
      off += want.size();
      if (kSesWithoutBraidDecoder.count(header.at("builder").str()) != 0) continue;
      ++checked;
      EXPECT_EQ(r.consumed, want.size()) << "decoder consumed a different length";
      if (!r.encodable) continue;
      ++encodable;
      EXPECT_EQ(to_hex(r.reencoded.data(), r.reencoded.size()), header.at("hex").str());
    }
  }
  // 72 headers minus the 8 small/medium SES headers Braid has no decoder for;
  // of those 64, the 6 UUD/RUDI and the 2 defer/RTR headers are decode-only.
  EXPECT_EQ(checked, 64);
  EXPECT_EQ(encodable, 56);
}

// What decode_frame does with each packet: Braid accepts every reliable PDS
// type with the standard request or the two responses, and UUD (datagrams)
// with the standard request; it rejects RUDI as unsupported and the
// small/medium SES headers as an unknown next header.
TEST(UetVectors, DecodeFrame) {
  ASSERT_NO_THROW(all_packets());
  std::map<DropReason, int> outcomes;
  for (const auto& p : all_packets()) {
    SCOPED_TRACE(trace_name(p));
    const auto& headers = p.entry->at("headers").items;
    ASSERT_EQ(headers.size(), 2u);
    const std::string pds_builder = headers[0].at("builder").str();
    const Json& pds_fields = headers[0].at("fields");
    DropReason want = DropReason::kNone;
    if (starts_with(pds_builder, "MakeRudi")) {
      want = DropReason::kUnsupportedPdsType;
    } else if (!starts_with(pds_builder, "MakeControlPkt")) {
      const uint64_t nh = pds_fields.at("next_hdr").u64();
      if (nh == 1 || nh == 2 || nh == 6) want = DropReason::kUnknownNextHeader;
    }

    const Bytes& frame = *p.frame;
    auto copy = exact_copy(frame.data(), frame.size());
    DecodeOptions opt;
    opt.udp_port = static_cast<uint16_t>(p.set->manifest.at("udp_dport").u64());
    ParsedPacket pkt;
    const DropReason got = decode_frame(copy.data(), frame.size(), opt, &pkt);
    EXPECT_EQ(got, want) << drop_reason_name(got) << " vs " << drop_reason_name(want);
    ++outcomes[got];
    if (got != DropReason::kNone) continue;

    const uint8_t* ip = frame.data() + kEthernetSize;
    EXPECT_EQ(pkt.ip.src, load_be32(ip + 12));
    EXPECT_EQ(pkt.ip.dst, load_be32(ip + 16));
    EXPECT_EQ(pkt.entropy, load_be16(ip + kIpv4Size));
    EXPECT_EQ(pkt.dst_port, opt.udp_port);

    // The headers decode_frame filled in must re-encode to the vector bytes.
    const Bytes pds_want = from_hex(headers[0].at("hex").str());
    Bytes enc(64);
    size_t n = 0;
    const auto type = static_cast<PdsType>(pkt.pro.type);
    if (is_request_type(pkt.pro.type)) {
      n = encode_request(enc.data(), pkt.req);
    } else if (type == PdsType::kAck || type == PdsType::kAckCc || type == PdsType::kAckCcx) {
      n = encode_ack(enc.data(), pkt.ack);
    } else if (type == PdsType::kNack || type == PdsType::kNackCcx) {
      n = encode_nack(enc.data(), pkt.nack);
    } else if (type == PdsType::kCtrl) {
      n = encode_ctrl(enc.data(), pkt.ctrl);
    } else if (type == PdsType::kUudReq) {
      n = encode_uud(enc.data(), pkt.pro);
    }
    EXPECT_EQ(to_hex(enc.data(), n), headers[0].at("hex").str());

    size_t consumed = pds_want.size();
    if (type == PdsType::kCtrl) {
      // CTRL has no next header: whatever follows is payload.
      EXPECT_FALSE(pkt.has_ses_request || pkt.has_ses_response);
    } else {
      const std::string ses_builder = headers[1].at("builder").str();
      n = 0;
      if (pkt.has_ses_request) {
        n = encode_ses_request(enc.data(), pkt.ses);
      } else if (pkt.has_ses_response && pkt.pro.next_hdr == 4) {
        n = encode_ses_response(enc.data(), pkt.resp);
      } else if (pkt.has_ses_response) {
        n = encode_ses_response_data(enc.data(), pkt.resp);
      }
      if (ses_builder != "MakeDeferSendHdrStd" && ses_builder != "MakeReadyToRestartHdrStd") {
        EXPECT_EQ(to_hex(enc.data(), n), headers[1].at("hex").str());
      }
      consumed += headers[1].at("hex").str().size() / 2;
    }
    const Bytes udp = udp_payload_of(frame);
    EXPECT_EQ(pkt.payload_len, udp.size() - consumed);
    EXPECT_EQ(pkt.payload, copy.data() + (frame.size() - udp.size()) + consumed);
  }
  EXPECT_EQ(outcomes[DropReason::kNone], 24);  // one of them the UUD datagram
  EXPECT_EQ(outcomes[DropReason::kUnsupportedPdsType], 5);
  EXPECT_EQ(outcomes[DropReason::kUnknownNextHeader], 7);
}

// The bit the vectors use for use_rsv_pdc, and the one UEC's reference
// provider uses, spelled out on the raw bytes (docs/wire-format.md).
TEST(UetVectors, UseRsvPdcBit) {
  const Bytes& frame = vector_sets()[0].pcap.packets[1];  // RUD request, SYN, use_rsv_pdc 1
  const Bytes udp = udp_payload_of(frame);
  EXPECT_EQ(load_be16(udp.data() + 10), 0x8876);  // use_rsv_pdc in bit 15, psn_offset 0x876
  RequestHeader h;
  ASSERT_EQ(decode_exact(decode_request, Bytes(udp.begin(), udp.begin() + 12), &h), 12u);
  EXPECT_EQ(h.pdc_info, 0x8);  // uet_pkt_hdr.h would call this value 1, not 8
  EXPECT_EQ(h.psn_offset, 0x876);
}

}  // namespace
}  // namespace braid::wire

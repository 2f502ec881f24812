// Ethernet / IPv4 / UDP framing and the one entry point that turns received
// bytes into a validated, fully decoded Braid packet. The UDP source port of
// every Braid packet is its entropy: ECMP hashes it to pick a path.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "wire/pds.h"
#include "wire/ses.h"
#include "wire/tss.h"

namespace braid::wire {

inline constexpr size_t kEthernetSize = 14;
inline constexpr size_t kIpv4Size = 20;
inline constexpr size_t kUdpSize = 8;
inline constexpr size_t kL2L4Size = kEthernetSize + kIpv4Size + kUdpSize;
inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint16_t kUetUdpPort = 4793;  // IANA
inline constexpr size_t kCrcTrailerSize = 4;

inline constexpr uint8_t kEcnNotEct = 0;
inline constexpr uint8_t kEcnEct1 = 1;
inline constexpr uint8_t kEcnEct0 = 2;
inline constexpr uint8_t kEcnCe = 3;
inline constexpr uint8_t kDscpAck = 46;  // EF, as UEC's reference provider

using MacAddr = std::array<uint8_t, 6>;

// Why a received frame was not handed to a connection. Every value has a
// counter in the endpoint; none of them is ever a crash.
enum class DropReason : uint8_t {
  kNone = 0,
  kTruncatedEthernet,
  kNotIpv4,
  kBadIpHeader,
  kBadIpChecksum,
  kIpFragment,
  kBadIpLength,
  kNotUdp,
  kBadUdpLength,
  kWrongUdpPort,
  kTruncatedPds,
  kUnknownPdsType,
  kUnsupportedPdsType,
  kTruncatedSes,
  kUnknownNextHeader,
  kBadCrc,
  kNoCrc,  // no CRC-32C trailer where one is required
  kNotForUs,
  kUnknownConnection,
  kSealedTrimmed,      // a sealed packet a switch trimmed: its ICV is gone
  kUnknownDatagramQp,  // a datagram (UUD) for no UD queue pair of ours, or malformed
  kCount,
};

const char* drop_reason_name(DropReason r);

struct Ipv4Info {
  uint32_t src = 0;  // host order
  uint32_t dst = 0;
  uint8_t dscp = 0;
  uint8_t ecn = 0;
  uint8_t ttl = 0;
};

// A decoded packet. Pointers refer into the caller's frame buffer.
struct ParsedPacket {
  MacAddr dst_mac{};
  MacAddr src_mac{};
  Ipv4Info ip;
  uint16_t entropy = 0;  // UDP source port
  uint16_t dst_port = 0;
  Prologue pro;
  RequestHeader req;  // valid when is_request_type(pro.type)
  AckHeader ack;      // ACK / ACK_CC / ACK_CCX
  NackHeader nack;    // NACK / NACK_CCX
  CtrlHeader ctrl;    // CTRL
  bool has_ses_request = false;
  bool has_ses_response = false;
  bool crc_checked = false;  // it carried a CRC-32C trailer, and it matched
  SesRequest ses;
  SesResponse resp;
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;
  bool trimmed = false;  // a switch cut the payload and re-marked DSCP (trim_dscp)
  // Sealed (TSS): only the PDS header is decoded (pro, req/ack/nack/ctrl);
  // the owner of the key opens the rest (Connection::open_sealed), which
  // decodes SES and payload from the clear text.
  bool sealed = false;
  TssHeader tss;
  const uint8_t* sealed_at = nullptr;  // the security header (UDP payload)
  uint32_t sealed_len = 0;
};

struct DecodeOptions {
  uint16_t udp_port = kUetUdpPort;
  // Require the CRC-32C trailer (kFlagCrcTrailer): packets without one are
  // dropped (kNoCrc). Packets that carry one are checked either way.
  bool crc_trailer = false;
  // Packets arriving with this DSCP were trimmed by the network: headers only,
  // no CRC check (the trailer was cut). 0xff: trimming not in use.
  uint8_t trim_dscp = 0xff;
};

// Validates and decodes one frame. Never reads outside [data, data + len).
// The frames of data requests and of READ responses' data take a shorter
// path that decodes them as decode_frame_generic does.
DropReason decode_frame(const uint8_t* data, size_t len, const DecodeOptions& opt,
                        ParsedPacket* out);
// Every frame the long way: the reference the short path is tested against.
DropReason decode_frame_generic(const uint8_t* data, size_t len, const DecodeOptions& opt,
                                ParsedPacket* out);

// Decodes the UDP payload only (PDS + SES + data). Used by decode_frame and by
// the fuzzer.
// `trimmed`: the payload was cut by a switch, trailer and all: not checked.
DropReason decode_udp_payload(const uint8_t* p, size_t len, bool crc_trailer, ParsedPacket* out,
                              bool trimmed = false);

uint16_t ipv4_checksum(const uint8_t* hdr, size_t len);

// The destination PDC id of a frame to a connection (any request but a SYN,
// ACK, NACK or CTRL), read from its headers without validating them: what
// steering needs to hand a frame to the engine that owns its connection.
// False for anything else (ARP, other protocols, unreliable PDS types, a
// frame too short). Never reads outside [data, data + len); decode_frame
// still checks everything where the frame lands.
bool peek_dpdcid(const uint8_t* data, size_t len, uint16_t* dpdcid);

// Precomputed Ethernet/IPv4/UDP headers towards one peer; per packet only the
// entropy, the lengths, TOS and the IP checksum change.
class FrameTemplate {
 public:
  FrameTemplate() = default;
  FrameTemplate(const MacAddr& src_mac, const MacAddr& dst_mac, uint32_t src_ip, uint32_t dst_ip,
                uint16_t dst_port, uint8_t ttl = 64);
  // Writes the 42 header bytes for a UDP payload of `udp_payload_len` bytes.
  void write(uint8_t* out, uint16_t entropy, uint32_t udp_payload_len, uint8_t tos) const;
  void set_dst_mac(const MacAddr& mac);

 private:
  std::array<uint8_t, kL2L4Size> hdr_{};
  uint32_t partial_sum_ = 0;  // IPv4 header sum without total length, TOS and checksum
};

}  // namespace braid::wire

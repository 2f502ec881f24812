// UET's transport security sublayer (TSS) as Braid uses it: a 12-byte
// security header between UDP and PDS, AES-256-GCM over the packet with a
// 16-byte ICV at its end. The PDS header stays in clear (authenticated, not
// encrypted: the receiver finds the connection, and so the key, by it); the
// SES header and the payload are encrypted. docs/security.md and
// docs/wire-format.md describe the layout, the keys and the nonces.
//
//   UDP | security header (12) | PDS header | SES + payload (encrypted) | ICV (16)
//
// Security header: type 0x01 (5 bits) | SP (1: a 4-byte SSI follows; Braid
// sends none, accepts one) | reserved | AN (1) | SDI (24) | epoch:TSC (64).
// Braid's 64-bit epoch:TSC is one per-direction counter that starts at a
// random value: with the direction's salt it makes the 96-bit GCM nonce,
// never used twice under a key.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace braid::wire {

inline constexpr uint8_t kPdsTypeSecurity = 0x01;
inline constexpr size_t kTssHeaderSize = 12;
inline constexpr size_t kTssSsiHeaderSize = 16;
inline constexpr size_t kTssIcvSize = 16;
// What sealing adds to a packet: the header in front, the ICV at the end.
inline constexpr size_t kTssOverhead = kTssHeaderSize + kTssIcvSize;
inline constexpr size_t kTssKeySize = 32;  // AES-256, and the secret keys derive from

using TssSecret = std::array<uint8_t, kTssKeySize>;

struct TssHeader {
  bool ssi_present = false;
  uint8_t an = 0;
  uint32_t sdi = 0;  // 24 bits
  uint32_t ssi = 0;
  uint64_t counter = 0;  // epoch:TSC
  size_t size = 0;       // 12 or 16
};

// Reads a security header; 0 when `len` is too short or the type is not TSS.
size_t decode_tss_header(const uint8_t* p, size_t len, TssHeader* h);

// Bytes of the clear PDS header at `p` (prologue included), by its type:
// what sealing leaves unencrypted. 0 for types Braid does not seal.
size_t pds_header_size(const uint8_t* p, size_t len);

// Everything a direction's key is derived from: a shared secret (the
// device's key) and what names the direction and this incarnation of it.
struct TssDirection {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t src_id = 0;
  uint16_t dst_id = 0;
  uint32_t start_psn = 0;           // the PSN the direction started at
  std::array<uint8_t, 16> nonce{};  // what both ends agreed for the connection
};

// One direction's AES-256-GCM state (OpenSSL's libcrypto). Allocation-free
// per packet; not thread-safe (one connection, one engine).
class TssKey {
 public:
  // HMAC-SHA256 of the secret over the direction's names: the key, and the
  // 4-byte nonce salt. Null if libcrypto fails.
  static std::unique_ptr<TssKey> derive(const TssSecret& secret, const TssDirection& d,
                                        uint32_t sdi);
  ~TssKey();
  TssKey(const TssKey&) = delete;
  TssKey& operator=(const TssKey&) = delete;

  // Seals a UDP payload in place. `p` holds `body` bytes (PDS header and
  // the rest) with at least kTssOverhead bytes of room after them. Returns
  // the new UDP payload length, 0 on failure. Each call takes a new counter.
  size_t seal(uint8_t* p, size_t body, uint32_t src_ip, uint32_t dst_ip);

  // Checks and decrypts a sealed UDP payload (`len` bytes from its security
  // header) into `out`: the PDS header, then the decrypted SES header and
  // payload. `out` has room for `len` bytes. Returns the bytes written, 0 if
  // it does not authenticate. Replays are the caller's (TssReplayWindow).
  size_t open(const uint8_t* p, size_t len, const TssHeader& h, uint32_t src_ip, uint32_t dst_ip,
              uint8_t* out);

  uint32_t sdi() const { return sdi_; }
  uint64_t next_counter() const { return counter_; }
  // Something was sealed with it: the peer may know it by now.
  bool used() const { return counter_ != start_; }

 private:
  TssKey() = default;
  void* ctx_ = nullptr;  // EVP_CIPHER_CTX
  std::array<uint8_t, 4> salt_{};
  uint32_t sdi_ = 0;
  uint64_t counter_ = 0;
  uint64_t start_ = 0;
};

// The counters a direction has taken, as IPsec's anti-replay window: the
// highest seen and the 2048 below it. The first one taken sets the start
// (a sender starts anywhere).
class TssReplayWindow {
 public:
  static constexpr uint64_t kSize = 2048;
  // Whether `counter` is new (not seen, not below the window).
  bool fresh(uint64_t counter) const;
  // Records `counter` (after it authenticated).
  void take(uint64_t counter);

 private:
  bool started_ = false;
  uint64_t top_ = 0;
  std::array<uint64_t, kSize / 64> seen_{};
};

}  // namespace braid::wire

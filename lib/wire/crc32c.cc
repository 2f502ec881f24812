#include "wire/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace braid::wire {

namespace {

constexpr uint32_t kPoly = 0x82f63b78;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc32c_table(const uint8_t* p, size_t len, uint32_t crc) {
  crc = ~crc;
  for (size_t i = 0; i < len; ++i) crc = kTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

// The CRC register's linearity splits a buffer into three streams the
// instruction works on side by side: it takes three cycles to give its
// result and can start one every cycle, so a single chain of it runs at a
// third of its rate (742-772 ns for an 8916-byte payload here, 18% of an
// AF_PACKET sender's core at MTU 9000). Register r after a block A, then B, then C:
// crc(r, ABC) = shift(shift(crc(r, A), |B|) ^ crc(0, B), |C|) ^ crc(0, C),
// where shift(x, n) is x carried through n zero bytes: a linear map of x's
// 32 bits, applied as four byte-indexed tables made at compile time.
#if defined(__x86_64__)
constexpr uint32_t zero_byte(uint32_t r) {
  return kTable[r & 0xff] ^ (r >> 8);
}

struct ShiftTable {
  std::array<std::array<uint32_t, 256>, 4> t{};
  uint32_t operator()(uint32_t x) const {
    return t[0][x & 0xff] ^ t[1][(x >> 8) & 0xff] ^ t[2][(x >> 16) & 0xff] ^ t[3][x >> 24];
  }
};

constexpr ShiftTable make_shift(size_t bytes) {
  std::array<uint32_t, 32> bit{};  // each of the 32 bits carried through `bytes` zeros
  for (int b = 0; b < 32; ++b) {
    uint32_t r = 1u << b;
    for (size_t i = 0; i < bytes; ++i) r = zero_byte(r);
    bit[b] = r;
  }
  ShiftTable s;
  for (int k = 0; k < 4; ++k) {
    for (uint32_t v = 0; v < 256; ++v) {
      uint32_t r = 0;
      for (int b = 0; b < 8; ++b) {
        if (v & (1u << b)) r ^= bit[8 * k + b];
      }
      s.t[k][v] = r;
    }
  }
  return s;
}

constexpr size_t kLong = 1024, kShort = 128;  // bytes per stream
constexpr ShiftTable kShiftLong = make_shift(kLong);
constexpr ShiftTable kShiftShort = make_shift(kShort);

template <size_t kBytes>
__attribute__((target("sse4.2"), always_inline)) inline uint32_t three_streams(
    const uint8_t* p, uint32_t r, const ShiftTable& shift) {
  uint64_t a = r, b = 0, c = 0;
  for (size_t i = 0; i < kBytes; i += 8) {
    uint64_t va, vb, vc;
    std::memcpy(&va, p + i, 8);
    std::memcpy(&vb, p + kBytes + i, 8);
    std::memcpy(&vc, p + 2 * kBytes + i, 8);
    a = _mm_crc32_u64(a, va);
    b = _mm_crc32_u64(b, vb);
    c = _mm_crc32_u64(c, vc);
  }
  return shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
         static_cast<uint32_t>(c);
}

// The rounds of three streams, leaving fewer than 3 x kShort bytes.
__attribute__((target("sse4.2"), noinline)) uint32_t crc32c_rounds(const uint8_t*& p, size_t& len,
                                                                   uint32_t r) {
  for (; len >= 3 * kLong; p += 3 * kLong, len -= 3 * kLong) {
    r = three_streams<kLong>(p, r, kShiftLong);
  }
  for (; len >= 3 * kShort; p += 3 * kShort, len -= 3 * kShort) {
    r = three_streams<kShort>(p, r, kShiftShort);
  }
  return r;
}

__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t len,
                                                        uint32_t crc) {
  uint32_t r = ~crc;
  if (len >= 3 * kShort) r = crc32c_rounds(p, len, r);  // (short frames: one stream)
  uint64_t c = r;
  for (; len >= 8; p += 8, len -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  r = static_cast<uint32_t>(c);
  while (len--) r = _mm_crc32_u8(r, *p++);
  return ~r;
}

bool have_sse42() {
  static const bool v = __builtin_cpu_supports("sse4.2");
  return v;
}
#endif

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t len, uint32_t crc) {
#if defined(__x86_64__)
  if (have_sse42()) return crc32c_sse42(data, len, crc);
#endif
  return crc32c_table(data, len, crc);
}

}  // namespace braid::wire

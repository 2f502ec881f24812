// Local scatter/gather lists and the copies in and out of them. Keys of local
// buffers are checked when a work request is posted (verbs layer); the core
// only sees validated pointers.
#pragma once

#include <cstdint>
#include <cstring>

namespace braid {

inline constexpr uint32_t kMaxSge = 6;

struct Sge {
  uint8_t* addr = nullptr;
  uint32_t length = 0;
  uint32_t lkey = 0;  // the region it was checked against (0: none, inline)
};

struct SgList {
  Sge sge[kMaxSge];
  uint8_t num = 0;

  uint64_t total_length() const {
    uint64_t n = 0;
    for (uint8_t i = 0; i < num; ++i) n += sge[i].length;
    return n;
  }
};

// Whether a buffer of the list lies in the region of this key.
inline bool sgl_uses(const SgList& l, uint32_t lkey) {
  for (uint8_t i = 0; i < l.num; ++i) {
    if (l.sge[i].lkey == lkey && l.sge[i].length > 0) return true;
  }
  return false;
}

// Copies a payload. Small ones (a 64 B message's) inline, as two copies of
// fixed size that may overlap in the middle: no call to memcpy, whose call
// and size dispatch cost more than the copy (bench/core_instructions.sh).
[[gnu::always_inline]] inline void copy_payload(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n > 64) {
    std::memcpy(dst, src, n);
  } else if (n >= 32) {
    std::memcpy(dst, src, 32);
    std::memcpy(dst + n - 32, src + n - 32, 32);
  } else if (n >= 16) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(dst, src, 8);
    std::memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n > 0) {
    std::memcpy(dst, src, n);
  }
}

// The address of bytes [offset, offset + len) of the list when they lie in
// one element (null when they span two, or lie beyond the list).
inline const uint8_t* sgl_span(const SgList& l, uint64_t offset, uint32_t len) {
  for (uint8_t i = 0; i < l.num; ++i) {
    if (offset < l.sge[i].length) {
      return l.sge[i].length - offset >= len ? l.sge[i].addr + offset : nullptr;
    }
    offset -= l.sge[i].length;
  }
  return nullptr;
}

// Copies len bytes starting at byte `offset` of the list into dst.
inline void copy_from_sgl(const SgList& l, uint64_t offset, uint8_t* dst, uint32_t len) {
  if (l.num == 1 && offset < l.sge[0].length && l.sge[0].length - offset >= len) [[likely]] {
    copy_payload(dst, l.sge[0].addr + offset, len);  // one buffer: most messages
    return;
  }
  for (uint8_t i = 0; i < l.num && len > 0; ++i) {
    if (offset >= l.sge[i].length) {
      offset -= l.sge[i].length;
      continue;
    }
    const uint64_t avail = l.sge[i].length - offset;
    const uint32_t n = avail < len ? static_cast<uint32_t>(avail) : len;
    std::memcpy(dst, l.sge[i].addr + offset, n);
    dst += n;
    len -= n;
    offset = 0;
  }
}

// Asks for the cache lines of [p, p + n) (at most kPrefetchMax bytes from
// p: the hardware's own prefetch follows a stream from there), to write
// (kWrite) or to read. Four lines a loop turn, then one at a time (a turn
// costs three instructions besides its prefetch: a 1 KiB packet's 17
// lines took 82 one at a time).
inline constexpr size_t kPrefetchMax = 2048;
template <bool kWrite>
[[gnu::always_inline]] inline void prefetch_lines(const uint8_t* p, size_t n) {
  if (n == 0) return;
  if (n > kPrefetchMax) n = kPrefetchMax;
  // Every line of [p, p + n), p not being on a line's start.
  uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + n;
  for (; a + 192 < end; a += 256) {
    __builtin_prefetch(reinterpret_cast<const void*>(a), kWrite, 3);
    __builtin_prefetch(reinterpret_cast<const void*>(a + 64), kWrite, 3);
    __builtin_prefetch(reinterpret_cast<const void*>(a + 128), kWrite, 3);
    __builtin_prefetch(reinterpret_cast<const void*>(a + 192), kWrite, 3);
  }
  for (; a < end; a += 64) __builtin_prefetch(reinterpret_cast<const void*>(a), kWrite, 3);
}

// Asks for the lines of [p, p + n) ahead of a copy into them: the next
// packet of a message lands right after this one's payload. A receiver's
// destinations are often out of cache (UCX's 4095 receive buffers of 8 KiB,
// taken in turn; many QPs' buffers), and a copy into lines out of cache
// waits for each one (BM_PlaceAhead: 1416 B into 32 MiB in turn, about 3x
// a copy into cache); asked for a packet ahead, they are there by then.
[[gnu::always_inline]] inline void prefetch_for_write(const uint8_t* p, size_t n) {
  prefetch_lines<true>(p, n);
}

// Asks for the lines of a payload a frame carries in place (the PMD copies
// it out when the burst is handed over): with many QPs the senders'
// buffers are out of cache too, and the PMD's copy waits for each line.
[[gnu::always_inline]] inline void prefetch_for_read(const uint8_t* p, size_t n) {
  prefetch_lines<false>(p, n);
}

// Copies len bytes from src into the list starting at byte `offset`; then,
// when `ahead` > 0, prefetches the `ahead` bytes after them (the next
// packet's) where they lie in the same element.
inline void copy_to_sgl(const SgList& l, uint64_t offset, const uint8_t* src, uint32_t len,
                        uint32_t ahead = 0) {
  if (l.num == 1 && offset < l.sge[0].length && l.sge[0].length - offset >= len) [[likely]] {
    uint8_t* const dst = l.sge[0].addr + offset;
    copy_payload(dst, src, len);
    const uint64_t left = l.sge[0].length - offset - len;
    if (ahead > 0) prefetch_for_write(dst + len, ahead < left ? ahead : left);
    return;
  }
  for (uint8_t i = 0; i < l.num && len > 0; ++i) {
    if (offset >= l.sge[i].length) {
      offset -= l.sge[i].length;
      continue;
    }
    const uint64_t avail = l.sge[i].length - offset;
    const uint32_t n = avail < len ? static_cast<uint32_t>(avail) : len;
    std::memcpy(l.sge[i].addr + offset, src, n);
    src += n;
    len -= n;
    offset = 0;
  }
}

}  // namespace braid

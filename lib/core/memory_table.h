// Registered memory regions and the one check every remote access passes
// before a byte is touched: key, protection domain, bounds, permission.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace braid {

// Values of enum ibv_access_flags.
enum AccessFlags : uint32_t {
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 2,
  kAccessRemoteRead = 4,
  kAccessRemoteAtomic = 8,
};

enum class AccessError : uint8_t {
  kNone = 0,
  kBadKey,        // no such region (or deregistered: the generation differs)
  kWrongPd,       // region belongs to another protection domain
  kOutOfBounds,   // [addr, addr + len) not inside the region, or it wraps
  kNoPermission,  // region lacks the access the operation needs
};

const char* access_error_name(AccessError e);

struct MemoryRegion {
  uint8_t* base = nullptr;
  uint64_t iova = 0;  // address the peer uses for base (usually == base)
  uint64_t length = 0;
  uint32_t access = 0;
  uint32_t pd = 0;
  uint32_t key = 0;
  bool valid = false;
};

class MemoryRegionTable {
 public:
  // Keys do not follow from the order of registration: the slot part is
  // scrambled with a per-table mask and each slot's generation starts at a
  // random value. A peer that knows none must guess 32 bits; one that knows
  // a key of the table still has a 12-bit generation to guess per region,
  // and each wrong guess costs it its QP (a refused access is fatal).
  // `seed` 0 draws them from the system.
  explicit MemoryRegionTable(uint64_t seed = 0);
  // Returns the key (used as both lkey and rkey), 0 when the table is full
  // (2^20 regions). A key is index << 12 | generation, the generation 1..4095
  // and bumped at every reuse of a slot, and freed slots are reused oldest
  // first: a stale key matches again only after 4095 reuses of its slot.
  uint32_t register_region(void* addr, uint64_t length, uint32_t access, uint32_t pd,
                           uint64_t iova);
  uint32_t register_region(void* addr, uint64_t length, uint32_t access, uint32_t pd) {
    return register_region(addr, length, access, pd,
                           static_cast<uint64_t>(reinterpret_cast<uintptr_t>(addr)));
  }
  bool deregister(uint32_t key);
  // ibv_rereg_mr: the region under `key` now covers other memory, belongs
  // to another PD or allows other accesses; the key stays. False: no such
  // region.
  bool reregister(uint32_t key, void* addr, uint64_t length, uint32_t access, uint32_t pd) {
    const uint32_t index = (key >> kGenBits) ^ index_mask_;
    if (find(key) == nullptr) return false;
    MemoryRegion& r = regions_[index];
    r.base = static_cast<uint8_t*>(addr);
    r.iova = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(addr));
    r.length = length;
    r.access = access;
    r.pd = pd;
    return true;
  }
  [[gnu::always_inline]] const MemoryRegion* find(uint32_t key) const {
    const uint32_t index = (key >> kGenBits) ^ index_mask_;
    if (index >= regions_.size()) return nullptr;
    const MemoryRegion& r = regions_[index];
    if (!r.valid || r.key != key) return nullptr;
    return &r;
  }

  // Resolves a remote access to a local pointer, or says why not. Inline:
  // every packet placed and every buffer posted passes here (out of line,
  // once the verbs calls were split over several files, it cost 26
  // instructions a 64 B WRITE, bench/verbs_instructions.sh), always: left
  // to itself the compiler calls it from the receive path.
  [[gnu::always_inline]] AccessError resolve(uint32_t key, uint64_t addr, uint64_t len,
                                             uint32_t need, uint32_t pd, uint8_t** out) const {
    const MemoryRegion* r = find(key);
    if (r == nullptr) return AccessError::kBadKey;
    if (r->pd != pd) return AccessError::kWrongPd;
    if ((r->access & need) != need) return AccessError::kNoPermission;
    if (addr < r->iova) return AccessError::kOutOfBounds;
    const uint64_t off = addr - r->iova;
    if (off > r->length || len > r->length - off) return AccessError::kOutOfBounds;
    *out = r->base + off;
    return AccessError::kNone;
  }

 private:
  static constexpr uint32_t kGenBits = 12;
  static constexpr uint32_t kMaxRegions = 1u << (32 - kGenBits);
  std::vector<MemoryRegion> regions_;
  std::vector<uint16_t> generation_;
  std::deque<uint32_t> free_;  // FIFO: a slot rests as long as possible
  uint32_t index_mask_ = 0;    // XORed into the slot part of every key
  uint64_t rng_ = 0;           // generation starts (splitmix64)
};

}  // namespace braid

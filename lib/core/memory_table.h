// Registered memory regions and the one check every remote access passes
// before a byte is touched: key, protection domain, bounds, permission.
#pragma once

#include <cstdint>
#include <vector>

namespace braid {

// Values of enum ibv_access_flags.
enum AccessFlags : uint32_t {
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 2,
  kAccessRemoteRead = 4,
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
  // Returns the key (used as both lkey and rkey). Keys are index << 8 | gen,
  // so a stale key of a deregistered slot never matches its successor.
  uint32_t register_region(void* addr, uint64_t length, uint32_t access, uint32_t pd,
                           uint64_t iova);
  uint32_t register_region(void* addr, uint64_t length, uint32_t access, uint32_t pd) {
    return register_region(addr, length, access, pd,
                           static_cast<uint64_t>(reinterpret_cast<uintptr_t>(addr)));
  }
  bool deregister(uint32_t key);
  const MemoryRegion* find(uint32_t key) const;

  // Resolves a remote access to a local pointer, or says why not.
  AccessError resolve(uint32_t key, uint64_t addr, uint64_t len, uint32_t need, uint32_t pd,
                      uint8_t** out) const;

 private:
  std::vector<MemoryRegion> regions_;
  std::vector<uint8_t> generation_;
  std::vector<uint32_t> free_;
};

}  // namespace braid

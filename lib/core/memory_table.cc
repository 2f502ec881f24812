#include "core/memory_table.h"

#include <random>

namespace braid {

const char* access_error_name(AccessError e) {
  switch (e) {
    case AccessError::kNone:
      return "none";
    case AccessError::kBadKey:
      return "bad_key";
    case AccessError::kWrongPd:
      return "wrong_pd";
    case AccessError::kOutOfBounds:
      return "out_of_bounds";
    case AccessError::kNoPermission:
      return "no_permission";
  }
  return "?";
}

namespace {
uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

MemoryRegionTable::MemoryRegionTable(uint64_t seed) {
  if (seed == 0) {
    std::random_device rd;
    seed = (uint64_t{rd()} << 32) | rd();
  }
  rng_ = seed;
  index_mask_ = static_cast<uint32_t>(splitmix64(&rng_)) & (kMaxRegions - 1);
}

uint32_t MemoryRegionTable::register_region(void* addr, uint64_t length, uint32_t access,
                                            uint32_t pd, uint64_t iova) {
  uint32_t index;
  if (!free_.empty()) {
    index = free_.front();
    free_.pop_front();
  } else {
    if (regions_.size() >= kMaxRegions) return 0;
    index = static_cast<uint32_t>(regions_.size());
    regions_.emplace_back();
    generation_.push_back(static_cast<uint16_t>(splitmix64(&rng_)));
  }
  uint16_t gen = static_cast<uint16_t>((generation_[index] + 1) & ((1u << kGenBits) - 1));
  if (gen == 0) gen = 1;  // key 0 is never valid
  generation_[index] = gen;
  MemoryRegion& r = regions_[index];
  r.base = static_cast<uint8_t*>(addr);
  r.iova = iova;
  r.length = length;
  r.access = access;
  r.pd = pd;
  r.key = ((index ^ index_mask_) << kGenBits) | gen;
  r.valid = true;
  return r.key;
}

bool MemoryRegionTable::deregister(uint32_t key) {
  const MemoryRegion* r = find(key);
  if (r == nullptr) return false;
  const uint32_t index = (key >> kGenBits) ^ index_mask_;
  regions_[index].valid = false;
  free_.push_back(index);
  return true;
}

}  // namespace braid

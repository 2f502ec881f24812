// CRC-32C (Castagnoli), used by Braid's optional end-to-end integrity trailer
// (the role RoCEv2's ICRC plays). SSE4.2 when the CPU has it, a table otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace braid::wire {

uint32_t crc32c(const uint8_t* data, size_t len, uint32_t crc = 0);

}  // namespace braid::wire

// A fast non-cryptographic checksum for ring records: sixteen 64-bit Fletcher-style lanes
// (sum and sum-of-sums, so both content and word order matter) folded with a 64-bit mixer.
// It runs near memory bandwidth (vectorised, with an AVX2 clone picked at load time), which is
// what lets the ring check every record without becoming the bottleneck. Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace marlaas {

// Checksum of n bytes at `data`, seeded (the ring seeds with the record header fields).
uint64_t Checksum64(const void* data, size_t n, uint64_t seed);
// Copies n bytes from src to dst and returns Checksum64(src, n, seed) in the same pass.
uint64_t CopyWithChecksum64(void* dst, const void* src, size_t n, uint64_t seed);

// The 32-bit form stored in record headers.
inline uint32_t Fold32(uint64_t x) { return uint32_t(x ^ (x >> 32)); }

}  // namespace marlaas

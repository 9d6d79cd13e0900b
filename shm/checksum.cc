#include "shm/checksum.h"

#include <cstring>

namespace marlaas {
namespace {

constexpr int kLanes = 8;
constexpr size_t kBlock = kLanes * sizeof(uint64_t);

inline uint64_t Mix(uint64_t x) {  // the murmur3 64-bit finaliser
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline uint64_t Finish(const uint64_t* a, const uint64_t* b, const unsigned char* tail,
                       size_t tail_len, size_t n, uint64_t seed) {
  uint64_t last = 0;
  std::memcpy(&last, tail, tail_len);
  uint64_t h = Mix(seed ^ (n * 0x9e3779b97f4a7c15ULL));
  h = Mix(h ^ last);
  for (int i = 0; i < kLanes; ++i) {
    h = Mix(h ^ a[i] ^ (uint64_t(i) << 56));
    h = Mix(h ^ b[i]);
  }
  return h;
}

template <bool kCopy>
inline uint64_t Run(unsigned char* dst, const unsigned char* src, size_t n, uint64_t seed) {
  uint64_t a[kLanes] = {0};
  uint64_t b[kLanes] = {0};
  const size_t blocks = n / kBlock;
  for (size_t k = 0; k < blocks; ++k) {
    uint64_t w[kLanes];
    std::memcpy(w, src + k * kBlock, kBlock);
    if (kCopy) std::memcpy(dst + k * kBlock, w, kBlock);
    for (int i = 0; i < kLanes; ++i) {
      a[i] += w[i];
      b[i] += a[i];
    }
  }
  size_t done = blocks * kBlock;
  // Whole words of the last partial block go to the lanes; the last <8 bytes to the finaliser.
  for (int i = 0; done + sizeof(uint64_t) <= n; ++i, done += sizeof(uint64_t)) {
    uint64_t w;
    std::memcpy(&w, src + done, sizeof(w));
    if (kCopy) std::memcpy(dst + done, &w, sizeof(w));
    a[i] += w;
    b[i] += a[i];
  }
  if (kCopy && done < n) std::memcpy(dst + done, src + done, n - done);
  return Finish(a, b, src + done, n - done, n, seed);
}

}  // namespace

__attribute__((target_clones("avx2", "default"))) uint64_t Checksum64(const void* data,
                                                                      size_t n, uint64_t seed) {
  return Run<false>(nullptr, static_cast<const unsigned char*>(data), n, seed);
}

__attribute__((target_clones("avx2", "default"))) uint64_t CopyWithChecksum64(void* dst,
                                                                              const void* src,
                                                                              size_t n,
                                                                              uint64_t seed) {
  return Run<true>(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), n,
                   seed);
}

}  // namespace marlaas

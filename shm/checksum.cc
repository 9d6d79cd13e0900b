#include "shm/checksum.h"

#include <cstring>

namespace marlaas {
namespace {

constexpr int kLanes = 16;  // 128-byte blocks: four 256-bit vectors of 64-bit lanes
constexpr size_t kBlock = kLanes * sizeof(uint64_t);

// Four lanes in one vector. GCC lowers it to one AVX2 register in the avx2 clone and to two SSE2
// registers in the default one; the lanes, and so the checksum, are the same either way.
typedef uint64_t Vec4 __attribute__((vector_size(32)));

__attribute__((always_inline)) inline Vec4 Load(const unsigned char* p) {
  Vec4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline uint64_t Mix(uint64_t x) {  // the murmur3 64-bit finaliser
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

template <bool kCopy>
__attribute__((always_inline)) inline uint64_t Run(unsigned char* dst, const unsigned char* src,
                                                   size_t n, uint64_t seed) {
  Vec4 a[4] = {}, b[4] = {};  // per lane: sum of words, and sum of those running sums
  const size_t blocks = n / kBlock;
  for (size_t k = 0; k < blocks; ++k) {
    const unsigned char* p = src + k * kBlock;
    const Vec4 w0 = Load(p), w1 = Load(p + 32), w2 = Load(p + 64), w3 = Load(p + 96);
    if (kCopy) {
      unsigned char* q = dst + k * kBlock;
      std::memcpy(q, &w0, 32);
      std::memcpy(q + 32, &w1, 32);
      std::memcpy(q + 64, &w2, 32);
      std::memcpy(q + 96, &w3, 32);
    }
    a[0] += w0;
    a[1] += w1;
    a[2] += w2;
    a[3] += w3;
    b[0] += a[0];
    b[1] += a[1];
    b[2] += a[2];
    b[3] += a[3];
  }
  uint64_t sa[kLanes], sb[kLanes];
  std::memcpy(sa, a, sizeof(sa));
  std::memcpy(sb, b, sizeof(sb));
  size_t done = blocks * kBlock;
  // Whole words of the last partial block go to the lanes in order; the last <8 bytes to the
  // finaliser.
  for (int i = 0; done + sizeof(uint64_t) <= n; ++i, done += sizeof(uint64_t)) {
    uint64_t w;
    std::memcpy(&w, src + done, sizeof(w));
    if (kCopy) std::memcpy(dst + done, &w, sizeof(w));
    sa[i] += w;
    sb[i] += sa[i];
  }
  if (kCopy && done < n) std::memcpy(dst + done, src + done, n - done);
  uint64_t last = 0;
  std::memcpy(&last, src + done, n - done);
  uint64_t h = Mix(seed ^ (n * 0x9e3779b97f4a7c15ULL));
  h = Mix(h ^ last);
  for (int i = 0; i < kLanes; ++i) {
    h = Mix(h ^ sa[i] ^ (uint64_t(i) << 56));
    h = Mix(h ^ sb[i]);
  }
  return h;
}

}  // namespace

__attribute__((target_clones("avx2", "default"))) uint64_t Checksum64(const void* data, size_t n,
                                                                      uint64_t seed) {
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

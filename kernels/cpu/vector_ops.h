// Vector helpers shared by the CPU kernels (lora_ops.cc, attention_ops.cc, logprob_ops.cc): written
// so the compiler vectorises them without reassociating floating-point sums (no -ffast-math), and
// always inlined, so each kernel's target_clones build (AVX-512, AVX2, baseline) gets its own.
#pragma once

#include <cstdint>

// A kernel built for AVX-512, AVX2 and the baseline, the best picked at load time.
#define MARLAAS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace marlaas::kernels {

// Dot product with 16 independent lanes, then a pairwise (vectorisable) reduction.
__attribute__((always_inline)) inline float Dot(const float* a, const float* b, int32_t n) {
  float acc[16] = {0};
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += a[i] * b[i];
  for (int w = 8; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

// y += alpha · x.
__attribute__((always_inline)) inline void Axpy(float alpha, const float* x, float* y, int32_t n) {
  for (int32_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace marlaas::kernels

// Vector helpers shared by the CPU kernels (lora_ops.cc, attention_ops.cc, logprob_ops.cc,
// sampling_ops.cc): written
// so the compiler vectorises them without reassociating floating-point sums (no -ffast-math), and
// always inlined, so each kernel's target_clones build (AVX-512, AVX2 with FMA, baseline) gets its
// own.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// A kernel built for AVX-512, AVX2 with FMA and the baseline, the best picked at load time. GCC's
// "avx2" target leaves out FMA (an AMD Zen then ran separate multiplies and adds), so with GCC 12
// or later the AVX2 build is "arch=x86-64-v3" (AVX2, FMA and the rest of that level); older GCCs
// and Clang do not take an arch= clone reliably and keep "avx2".
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#define MARLAAS_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#else
#define MARLAAS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

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

// e^x within 2 ulp for -86.6 <= x <= 88.37. Above, the result is capped at e^88.37 (+inf is not
// reached); below, it is e^-86.6 (2.5e-38, a normal float: never 0 or a slow subnormal). NaN gives
// NaN (a non-finite score stays visible, as with std::exp). Written without branches or calls, so
// that a loop of it vectorises (std::exp is a call per element): x = n·ln 2 + r with |r| <= ln 2 /
// 2, e^r from Cephes' degree-5 polynomial, 2^n put into the exponent bits.
__attribute__((always_inline)) inline float Exp(float x) {
  const float in = x;
  x = x < 88.3762626f ? x : 88.3762626f;
  x = x > -86.6f ? x : -86.6f;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504f + shifter) - shifter;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float e = 1.9875691500e-4f;
  e = e * r + 1.3981999507e-3f;
  e = e * r + 8.3334519073e-3f;
  e = e * r + 4.1665795894e-2f;
  e = e * r + 1.6666665459e-1f;
  e = e * r + 5.0000001201e-1f;
  e = e * r * r + r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof(two_n));
  return in != in ? in : e * two_n;
}

// Σ x[i] with 16 independent lanes, then a pairwise reduction (vectorises; a fixed order).
__attribute__((always_inline)) inline float Sum(const float* x, int32_t n) {
  float acc[16] = {0};
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += x[i];
  for (int w = 8; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

// Σ e^(x[i]·scale − shift), the terms (Exp's range and NaN rules hold for each) added in 16
// double lanes and then pairwise: one vectorised pass, nothing written. Float lanes lost up to
// 1.4e-5 of a sum whose large terms share a lane with many small ones.
__attribute__((always_inline)) inline double SumExp(const float* x, int32_t n, float scale,
                                                    float shift) {
  double acc[16] = {0};
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += double(Exp(x[i + l] * scale - shift));
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += double(Exp(x[i] * scale - shift));
  for (int w = 8; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

// Σ x[i] in 16 double lanes, then pairwise (vectorises; within about n·1e-16 relative).
__attribute__((always_inline)) inline double SumAsDouble(const float* x, int32_t n) {
  double acc[16] = {0};
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += double(x[i + l]);
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] += double(x[i]);
  for (int w = 8; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  }
  return acc[0];
}

// max_i x[i] (-inf for n = 0), the same way; NaNs are passed over.
__attribute__((always_inline)) inline float Max(const float* x, int32_t n) {
  float acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = -INFINITY;
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] = x[i + l] > acc[l] ? x[i + l] : acc[l];
  }
  for (int l = 0; i < n; ++i, ++l) acc[l] = x[i] > acc[l] ? x[i] : acc[l];
  for (int w = 8; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) acc[l] = acc[l + w] > acc[l] ? acc[l + w] : acc[l];
  }
  return acc[0];
}

// y += alpha · x.
__attribute__((always_inline)) inline void Axpy(float alpha, const float* x, float* y, int32_t n) {
  for (int32_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace marlaas::kernels

#include "kernels/lora_ops.h"

namespace marlaas::kernels {
namespace {

// Dot product with 16 independent lanes so the compiler vectorises it without reassociating
// (no -ffast-math needed); inlined into each target clone below.
__attribute__((always_inline)) inline float Dot(const float* a, const float* b, int32_t n) {
  float acc[16] = {0};
  int32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  float s = 0;
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s + tail;
}

__attribute__((always_inline)) inline void ShrinkRows(const LoraProblem& p, const AdapterRef& ad,
                                                      int32_t row_begin, int32_t row_end,
                                                      const float* x, float* y) {
  // Four rows at a time share each A row while it is in L1.
  int32_t i = row_begin;
  for (; i + 4 <= row_end; i += 4) {
    const float* x0 = x + int64_t(i) * p.x_stride;
    for (int32_t r = 0; r < ad.rank; ++r) {
      const float* a = ad.a + int64_t(r) * p.in_dim;
      for (int k = 0; k < 4; ++k)
        y[int64_t(i + k) * p.y_stride + r] = Dot(x0 + k * p.x_stride, a, p.in_dim);
    }
  }
  for (; i < row_end; ++i) {
    const float* xi = x + int64_t(i) * p.x_stride;
    for (int32_t r = 0; r < ad.rank; ++r) {
      y[int64_t(i) * p.y_stride + r] = Dot(xi, ad.a + int64_t(r) * p.in_dim, p.in_dim);
    }
  }
}

__attribute__((always_inline)) inline void ExpandRow(const LoraProblem& p, const AdapterRef& ad,
                                                     const float* yi, float* oi) {
  float ys[kMaxLoraRank];
  for (int32_t r = 0; r < ad.rank; ++r) ys[r] = yi[r] * ad.scale;
  for (int32_t o = 0; o < p.out_dim; ++o) oi[o] += Dot(ys, ad.b + int64_t(o) * ad.rank, ad.rank);
}

}  // namespace

#define MARLAAS_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

MARLAAS_CLONES void BgmvShrink(const LoraProblem& p, const int32_t* row_adapter, const float* x,
                               float* y) {
  for (int32_t i = 0; i < p.rows; ++i) {
    const int32_t k = row_adapter[i];
    if (k >= 0) ShrinkRows(p, p.adapters[k], i, i + 1, x, y);
  }
}

MARLAAS_CLONES void BgmvExpand(const LoraProblem& p, const int32_t* row_adapter, const float* y,
                               float* out) {
  for (int32_t i = 0; i < p.rows; ++i) {
    const int32_t k = row_adapter[i];
    if (k >= 0)
      ExpandRow(p, p.adapters[k], y + int64_t(i) * p.y_stride, out + int64_t(i) * p.out_stride);
  }
}

MARLAAS_CLONES void SgmvShrink(const LoraProblem& p, const RowSegments& segs, const float* x,
                               float* y) {
  for (int32_t s = 0; s < segs.num; ++s) {
    const int32_t k = segs.adapter[s];
    if (k >= 0) ShrinkRows(p, p.adapters[k], segs.start[s], segs.start[s + 1], x, y);
  }
}

MARLAAS_CLONES void SgmvExpand(const LoraProblem& p, const RowSegments& segs, const float* y,
                               float* out) {
  for (int32_t s = 0; s < segs.num; ++s) {
    const int32_t k = segs.adapter[s];
    if (k < 0) continue;
    for (int32_t i = segs.start[s]; i < segs.start[s + 1]; ++i) {
      ExpandRow(p, p.adapters[k], y + int64_t(i) * p.y_stride, out + int64_t(i) * p.out_stride);
    }
  }
}

}  // namespace marlaas::kernels

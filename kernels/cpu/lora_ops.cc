#include "kernels/lora_ops.h"

#include "kernels/cpu/vector_ops.h"

namespace marlaas::kernels {
namespace {

__attribute__((always_inline)) inline void ShrinkRows(const LoraProblem& p, const AdapterRef& ad,
                                                      int32_t row_begin, int32_t row_end,
                                                      const float* x, float* y) {
  for (int32_t i = row_begin; i < row_end; ++i) {
    const float* xi = x + int64_t(i) * p.x_stride;
    for (int32_t r = 0; r < ad.rank; ++r) {
      y[int64_t(i) * p.y_stride + r] = Dot(xi, ad.a + int64_t(r) * p.in_dim, p.in_dim);
    }
  }
}

// Four ranks per pass over the output row: a quarter of the loads and stores of `oi`.
__attribute__((always_inline)) inline void ExpandRow(const LoraProblem& p, const AdapterRef& ad,
                                                     const float* yi, float* oi) {
  const int64_t n = p.out_dim;
  int32_t r = 0;
  for (; r + 4 <= ad.rank; r += 4) {
    const float c0 = yi[r] * ad.scale, c1 = yi[r + 1] * ad.scale, c2 = yi[r + 2] * ad.scale,
                c3 = yi[r + 3] * ad.scale;
    const float *b0 = ad.bt + r * n, *b1 = b0 + n, *b2 = b1 + n, *b3 = b2 + n;
    for (int64_t o = 0; o < n; ++o) oi[o] += c0 * b0[o] + c1 * b1[o] + c2 * b2[o] + c3 * b3[o];
  }
  for (; r < ad.rank; ++r) Axpy(yi[r] * ad.scale, ad.bt + r * n, oi, int32_t(n));
}

}  // namespace

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

// Four rows per pass over each gradient row: a quarter of its loads and stores.
MARLAAS_CLONES void SgmvWeightGrad(const WeightGradProblem& p, const RowSegments& segs,
                                   const float* left, const float* right, float* const* grads) {
  const int64_t n = p.width, ls = p.left_stride, rs = p.right_stride;
  for (int32_t s = 0; s < segs.num; ++s) {
    const int32_t k = segs.adapter[s];
    if (k < 0) continue;
    const AdapterRef& ad = p.adapters[k];
    float* g = grads[k];
    int32_t i = segs.start[s];
    for (; i + 4 <= segs.start[s + 1]; i += 4) {
      const float *l0 = left + int64_t(i) * ls, *l1 = l0 + ls, *l2 = l1 + ls, *l3 = l2 + ls;
      const float *r0 = right + int64_t(i) * rs, *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs;
      for (int32_t r = 0; r < ad.rank; ++r) {
        const float c0 = l0[r] * ad.scale, c1 = l1[r] * ad.scale, c2 = l2[r] * ad.scale,
                    c3 = l3[r] * ad.scale;
        float* gr = g + int64_t(r) * n;
        for (int64_t o = 0; o < n; ++o) gr[o] += c0 * r0[o] + c1 * r1[o] + c2 * r2[o] + c3 * r3[o];
      }
    }
    for (; i < segs.start[s + 1]; ++i) {
      const float* li = left + int64_t(i) * ls;
      for (int32_t r = 0; r < ad.rank; ++r)
        Axpy(li[r] * ad.scale, right + int64_t(i) * rs, g + int64_t(r) * n, int32_t(n));
    }
  }
}

}  // namespace marlaas::kernels

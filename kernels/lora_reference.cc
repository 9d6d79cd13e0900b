#include "kernels/lora_reference.h"

#include <cstddef>
#include <vector>

namespace marlaas::kernels::reference {
namespace {

void ShrinkRow(const LoraProblem& p, const AdapterRef& ad, int32_t i, const float* x, float* y) {
  for (int32_t r = 0; r < ad.rank; ++r) {
    double s = 0;
    for (int32_t c = 0; c < p.in_dim; ++c) {
      s += double(x[int64_t(i) * p.x_stride + c]) * double(ad.a[int64_t(r) * p.in_dim + c]);
    }
    y[int64_t(i) * p.y_stride + r] = float(s);
  }
}

void ExpandRow(const LoraProblem& p, const AdapterRef& ad, int32_t i, const float* y, float* out) {
  for (int32_t o = 0; o < p.out_dim; ++o) {
    double s = 0;
    for (int32_t r = 0; r < ad.rank; ++r) {
      s += double(y[int64_t(i) * p.y_stride + r]) * double(ad.bt[int64_t(r) * p.out_dim + o]);
    }
    out[int64_t(i) * p.out_stride + o] += float(double(ad.scale) * s);
  }
}

// Expands segments into one adapter index per row.
std::vector<int32_t> RowsOf(const LoraProblem& p, const RowSegments& segs) {
  std::vector<int32_t> rows(size_t(p.rows), -1);
  for (int32_t s = 0; s < segs.num; ++s) {
    for (int32_t i = segs.start[s]; i < segs.start[s + 1]; ++i) rows[size_t(i)] = segs.adapter[s];
  }
  return rows;
}

}  // namespace

void BgmvShrink(const LoraProblem& p, const int32_t* row_adapter, const float* x, float* y) {
  for (int32_t i = 0; i < p.rows; ++i) {
    if (row_adapter[i] >= 0) ShrinkRow(p, p.adapters[row_adapter[i]], i, x, y);
  }
}

void BgmvExpand(const LoraProblem& p, const int32_t* row_adapter, const float* y, float* out) {
  for (int32_t i = 0; i < p.rows; ++i) {
    if (row_adapter[i] >= 0) ExpandRow(p, p.adapters[row_adapter[i]], i, y, out);
  }
}

void SgmvShrink(const LoraProblem& p, const RowSegments& segs, const float* x, float* y) {
  const std::vector<int32_t> rows = RowsOf(p, segs);
  reference::BgmvShrink(p, rows.data(), x, y);
}

void SgmvExpand(const LoraProblem& p, const RowSegments& segs, const float* y, float* out) {
  const std::vector<int32_t> rows = RowsOf(p, segs);
  reference::BgmvExpand(p, rows.data(), y, out);
}

void SgmvWeightGrad(const WeightGradProblem& p, const RowSegments& segs, const float* left,
                    const float* right, float* const* grads) {
  for (int32_t s = 0; s < segs.num; ++s) {
    const int32_t k = segs.adapter[s];
    if (k < 0) continue;
    const AdapterRef& ad = p.adapters[k];
    for (int32_t r = 0; r < ad.rank; ++r) {
      for (int32_t o = 0; o < p.width; ++o) {
        double sum = 0;
        for (int32_t i = segs.start[s]; i < segs.start[s + 1]; ++i)
          sum += double(left[int64_t(i) * p.left_stride + r]) *
                 double(right[int64_t(i) * p.right_stride + o]);
        grads[k][int64_t(r) * p.width + o] += float(double(ad.scale) * sum);
      }
    }
  }
}

}  // namespace marlaas::kernels::reference

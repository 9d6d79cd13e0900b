// Multi-LoRA CPU kernels against the plain reference, on random shapes, ranks, strides and
// adapter assignments (base-only rows included), and the weight gradient against finite sums.
#include "kernels/lora_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/lora_reference.h"

namespace marlaas::kernels {
namespace {

struct Case {
  std::vector<std::vector<float>> a, b;
  std::vector<AdapterRef> adapters;
  LoraProblem p;
  std::vector<float> x, y, out;
};

std::vector<float> Random(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

Case MakeCase(std::mt19937& rng, int rows, int in_dim, int out_dim, int num_adapters) {
  Case c;
  c.a.resize(size_t(num_adapters));
  c.b.resize(size_t(num_adapters));
  int max_rank = 0;
  for (int k = 0; k < num_adapters; ++k) {
    const int rank = 1 + int(rng() % kMaxLoraRank);  // ranks differ within one batch
    max_rank = std::max(max_rank, rank);
    c.a[size_t(k)] = Random(rng, size_t(rank) * size_t(in_dim));
    c.b[size_t(k)] = Random(rng, size_t(rank) * size_t(out_dim));  // Bᵀ
    c.adapters.push_back(
        AdapterRef{c.a[size_t(k)].data(), c.b[size_t(k)].data(), rank, 0.5f + float(rng() % 8)});
  }
  c.p.rows = rows;
  c.p.in_dim = in_dim;
  c.p.out_dim = out_dim;
  c.p.adapters = c.adapters.data();
  c.p.num_adapters = num_adapters;
  c.p.x_stride = in_dim + int(rng() % 3);  // strides wider than the rows
  c.p.y_stride = max_rank + int(rng() % 3);
  c.p.out_stride = out_dim + int(rng() % 3);
  c.x = Random(rng, size_t(rows) * size_t(c.p.x_stride));
  c.y = Random(rng, size_t(rows) * size_t(c.p.y_stride));
  c.out = Random(rng, size_t(rows) * size_t(c.p.out_stride));
  return c;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << what << " at " << i;
  }
}

TEST(LoraOpsTest, BgmvMatchesReferenceOnRandomProblems) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const int rows = 1 + int(rng() % 40), adapters = 1 + int(rng() % 6);
    Case c = MakeCase(rng, rows, 1 + int(rng() % 300), 1 + int(rng() % 300), adapters);
    std::vector<int32_t> row_adapter(static_cast<size_t>(rows));
    for (auto& r : row_adapter) r = int32_t(rng() % uint32_t(adapters + 1)) - 1;  // -1: base only
    std::vector<float> y = c.y, y_ref = c.y, out = c.out, out_ref = c.out;
    BgmvShrink(c.p, row_adapter.data(), c.x.data(), y.data());
    reference::BgmvShrink(c.p, row_adapter.data(), c.x.data(), y_ref.data());
    ExpectClose(y, y_ref, "bgmv shrink");
    BgmvExpand(c.p, row_adapter.data(), c.y.data(), out.data());
    reference::BgmvExpand(c.p, row_adapter.data(), c.y.data(), out_ref.data());
    ExpectClose(out, out_ref, "bgmv expand");
    // Base-only rows are untouched.
    for (int i = 0; i < rows; ++i) {
      if (row_adapter[size_t(i)] >= 0) continue;
      for (int o = 0; o < c.p.out_dim; ++o) {
        const size_t at = size_t(i) * size_t(c.p.out_stride) + size_t(o);
        ASSERT_EQ(out[at], c.out[at]);
      }
    }
  }
}

TEST(LoraOpsTest, SgmvMatchesReferenceOnRandomSegments) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 30; ++trial) {
    const int rows = 1 + int(rng() % 64), adapters = 1 + int(rng() % 6);
    Case c = MakeCase(rng, rows, 1 + int(rng() % 300), 1 + int(rng() % 300), adapters);
    std::vector<int32_t> start = {0}, seg_adapter;
    while (start.back() < rows) {  // random segment lengths, some empty
      start.push_back(std::min(rows, start.back() + int(rng() % 9)));
      seg_adapter.push_back(int32_t(rng() % uint32_t(adapters + 1)) - 1);
    }
    RowSegments segs{start.data(), seg_adapter.data(), int32_t(seg_adapter.size())};
    std::vector<float> y = c.y, y_ref = c.y, out = c.out, out_ref = c.out;
    SgmvShrink(c.p, segs, c.x.data(), y.data());
    reference::SgmvShrink(c.p, segs, c.x.data(), y_ref.data());
    ExpectClose(y, y_ref, "sgmv shrink");
    SgmvExpand(c.p, segs, c.y.data(), out.data());
    reference::SgmvExpand(c.p, segs, c.y.data(), out_ref.data());
    ExpectClose(out, out_ref, "sgmv expand");
  }
}

TEST(LoraOpsTest, SgmvWeightGradMatchesReferenceAndAccumulates) {
  std::mt19937 rng(14);
  for (int trial = 0; trial < 30; ++trial) {
    const int rows = 1 + int(rng() % 64), adapters = 1 + int(rng() % 6);
    const int width = 1 + int(rng() % 300);
    Case c = MakeCase(rng, rows, 1, 1, adapters);  // only the adapters' ranks and scales count
    WeightGradProblem p;
    p.width = width;
    p.adapters = c.adapters.data();
    p.num_adapters = adapters;
    p.left_stride = c.p.y_stride;
    p.right_stride = width + int(rng() % 3);
    const std::vector<float> left = Random(rng, size_t(rows) * size_t(p.left_stride));
    const std::vector<float> right = Random(rng, size_t(rows) * size_t(p.right_stride));
    std::vector<int32_t> start = {0}, seg_adapter;
    while (start.back() < rows) {  // random lengths (some empty, some not a multiple of 4)
      start.push_back(std::min(rows, start.back() + int(rng() % 11)));
      seg_adapter.push_back(int32_t(rng() % uint32_t(adapters + 1)) - 1);
    }
    RowSegments segs{start.data(), seg_adapter.data(), int32_t(seg_adapter.size())};
    // Gradients start non-zero: the op accumulates.
    std::vector<std::vector<float>> got, want;
    std::vector<float*> got_ptr, want_ptr;
    for (int k = 0; k < adapters; ++k) {
      got.push_back(Random(rng, size_t(c.adapters[size_t(k)].rank) * size_t(width)));
      want.push_back(got.back());
    }
    for (int k = 0; k < adapters; ++k) {
      got_ptr.push_back(got[size_t(k)].data());
      want_ptr.push_back(want[size_t(k)].data());
    }
    const std::vector<std::vector<float>> before = got;
    SgmvWeightGrad(p, segs, left.data(), right.data(), got_ptr.data());
    reference::SgmvWeightGrad(p, segs, left.data(), right.data(), want_ptr.data());
    for (int k = 0; k < adapters; ++k) ExpectClose(got[size_t(k)], want[size_t(k)], "weight grad");
    // An adapter that no segment uses keeps its gradient as it was.
    for (int k = 0; k < adapters; ++k) {
      if (std::find(seg_adapter.begin(), seg_adapter.end(), k) == seg_adapter.end()) {
        EXPECT_EQ(got[size_t(k)], before[size_t(k)]) << "adapter " << k;
      }
    }
  }
}

TEST(LoraOpsTest, SgmvWeightGradIsTheSumOfTheRowsOuterProducts) {
  // One adapter of rank 2, scale 3, one segment of 5 rows: grads[r][o] = 3·Σ_i
  // left[i][r]·right[i][o].
  AdapterRef ad{nullptr, nullptr, 2, 3.0f};
  WeightGradProblem p{3, &ad, 1, 2, 3};
  const float left[] = {1, 0, 0, 1, 1, 1, 2, 0, 0, -1};
  const float right[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 0, 0, 0, 0, 1};
  const int32_t start[] = {0, 5}, adapter[] = {0};
  std::vector<float> g(6, 0.f);
  float* gp = g.data();
  SgmvWeightGrad(p, RowSegments{start, adapter, 1}, left, right, &gp);
  // rank 0: rows 0, 2 and twice row 3: (1,2,3)+(7,8,9)+(2,0,0) = (10,10,12); rank 1: rows 1, 2
  // and minus row 4: (4,5,6)+(7,8,9)-(0,0,1) = (11,13,14).
  EXPECT_EQ(g, (std::vector<float>{30, 30, 36, 33, 39, 42}));
}

TEST(LoraOpsTest, ShrinkThenExpandEqualsTheMergedWeightUpdate) {
  // out += scale · B · A · x, the definition of a LoRA delta, checked against W' = scale·B·A.
  std::mt19937 rng(13);
  Case c = MakeCase(rng, 5, 37, 29, 1);
  const AdapterRef& ad = c.adapters[0];
  std::vector<int32_t> rows(5, 0);
  std::vector<float> y(c.y.size()), out = c.out;
  BgmvShrink(c.p, rows.data(), c.x.data(), y.data());
  BgmvExpand(c.p, rows.data(), y.data(), out.data());
  for (int i = 0; i < 5; ++i) {
    for (int o = 0; o < 29; ++o) {
      double delta = 0;
      for (int j = 0; j < 37; ++j) {
        double w = 0;
        for (int r = 0; r < ad.rank; ++r) w += double(ad.bt[r * 29 + o]) * ad.a[r * 37 + j];
        delta += ad.scale * w * c.x[size_t(i) * size_t(c.p.x_stride) + size_t(j)];
      }
      const size_t at = size_t(i) * size_t(c.p.out_stride) + size_t(o);
      EXPECT_NEAR(out[at], c.out[at] + delta, 1e-3 * (1 + std::fabs(delta)));
    }
  }
}

}  // namespace
}  // namespace marlaas::kernels

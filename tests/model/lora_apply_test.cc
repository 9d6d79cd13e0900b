// AddLoraDelta with autograd on (the trainer's path: on the CPU the SGMV kernels' autograd op, and
// the LibTorch ops a CUDA device runs) against a plain per-row reference, on random inputs: rows in
// segments of unequal lengths, adapters of two ranks (several segments of a rank are computed as
// one padded batch, a lone one on its own), an adapter without the projection, rows without an
// adapter, and one adapter in two segments; with the adapters' own views and with each split once
// (LoraViews, as a training forward does). Outputs and the gradients of the rows, the base output
// and every adapter's flat tensor must match.
#include "model/lora_apply.h"

#include <gtest/gtest.h>

#include <random>

#include "model/transformer.h"
#include "tests/torch_test_util.h"

namespace marlaas::model {
namespace {

using ::marlaas::testing::MaxAbsDiff;

const std::string kData = MARLAAS_TEST_DATA_DIR;

TEST(LoraApplyTest, BatchedSegmentsEqualAPerRowReferenceWithGradients) {
  auto w = BaseWeights::Load(kData + "/llama");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const int layer = 1;
  const LoraTarget target = LoraTarget::kUp;
  const uint32_t all = (1u << kNumLoraTargets) - 1, without = all & ~(1u << int(target));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    const bool split = trial % 2 == 1;
    const bool libtorch_ops = (trial / 2) % 2 == 1;
    // Five adapters of rank 4 (one without this projection), two of rank 2.
    std::vector<LoraAdapter> adapters;
    for (int k = 0; k < 7; ++k) {
      auto a = LoraAdapter::Create(**w, k < 5 ? 4 : 2, float(1 + k), k == 3 ? without : all,
                                   1000 * uint64_t(trial) + uint64_t(k));
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      torch::NoGradGuard no_grad;
      a->flat().normal_(0, 0.3);
      a->flat().set_requires_grad(true);
      adapters.push_back(std::move(*a));
    }
    LoraSegments segs;
    for (auto& a : adapters) segs.adapters.push_back(&a);
    if (split) segs.views = LoraViews::Of(segs.adapters);
    segs.libtorch_ops = libtorch_ops;
    // Segment adapters: every adapter, one twice, and one segment without an adapter, each with
    // 1-9 rows (so groups are cut where padding would more than double a segment).
    std::vector<int32_t> order = {0, 1, 5, -1, 2, 3, 6, 4, 0};
    std::shuffle(order.begin(), order.end(), rng);
    segs.start.push_back(0);
    for (int32_t k : order) {
      segs.adapter.push_back(k);
      segs.start.push_back(segs.start.back() + int32_t(1 + rng() % 9));
    }
    const int64_t rows = segs.start.back();
    const auto& W = (*w)->layers[size_t(layer)].proj[size_t(target)];
    auto x = torch::randn({rows, W.size(1)}).requires_grad_(true);
    auto y = torch::randn({rows, W.size(0)}).requires_grad_(true);
    auto probe = torch::randn({rows, W.size(0)});
    torch::Tensor got = AddLoraDelta(x, y, layer, target, segs);
    // The path asked for ran: LibTorch's batched groups keep their rows for the forward's other
    // projections, the kernels' op keeps none; a second projection computes the same.
    EXPECT_EQ(segs.batch_rows.empty(), !libtorch_ops) << "trial " << trial;
    EXPECT_EQ(got.grad_fn()->name().find("SegmentedLora") != std::string::npos, !libtorch_ops)
        << got.grad_fn()->name();
    EXPECT_TRUE(torch::equal(AddLoraDelta(x, y, layer, target, segs).detach(), got.detach()));
    (got * probe).sum().backward();

    // Reference: fresh leaves with the same values, one row at a time.
    auto xr = x.detach().clone().requires_grad_(true);
    auto yr = y.detach().clone().requires_grad_(true);
    std::vector<LoraAdapter> refs;
    for (auto& a : adapters) {
      refs.push_back(*LoraAdapter::FromFlat(a.layout(), a.flat().detach().data_ptr<float>()));
      refs.back().flat().set_requires_grad(true);
    }
    std::vector<torch::Tensor> want_rows;
    for (size_t s = 0; s < segs.adapter.size(); ++s) {
      for (int64_t r = segs.start[s]; r < segs.start[s + 1]; ++r) {
        torch::Tensor row = yr[r];
        const int32_t k = segs.adapter[s];
        if (k >= 0 && refs[size_t(k)].has(target)) {
          const LoraAdapter& ad = refs[size_t(k)];
          row =
              row + torch::matmul(ad.B(layer, target), torch::matmul(ad.A(layer, target), xr[r])) *
                        ad.scale();
        }
        want_rows.push_back(row);
      }
    }
    auto want = torch::stack(want_rows);
    (want * probe).sum().backward();
    segs.views.clear();  // the views hold the flats' graph
    EXPECT_LT(MaxAbsDiff(got.detach(), want.detach()), 1e-4) << "trial " << trial;
    EXPECT_LT(MaxAbsDiff(x.grad(), xr.grad()), 1e-4) << "trial " << trial;
    EXPECT_LT(MaxAbsDiff(y.grad(), yr.grad()), 1e-6) << "trial " << trial;
    for (size_t k = 0; k < adapters.size(); ++k) {
      auto g = adapters[k].flat().grad(), r = refs[k].flat().grad();
      if (k == 3) {  // no rows of this projection: no gradient, or an all-zero one
        EXPECT_TRUE(!g.defined() || g.abs().max().item<double>() == 0) << "adapter 3";
        continue;
      }
      ASSERT_TRUE(g.defined() && r.defined()) << "adapter " << k;
      EXPECT_GT(r.abs().max().item<double>(), 1e-3) << "adapter " << k;
      EXPECT_LT(MaxAbsDiff(g, r), 1e-4 * (1 + r.abs().max().item<double>()))
          << "trial " << trial << " adapter " << k;
    }
  }
}

}  // namespace
}  // namespace marlaas::model

// SegmentedLoraDelta (the CPU training path's LoRA op) against the same delta written with
// LibTorch ops, on random inputs: several segments sharing an adapter, segments without one,
// empty segments, ranks that differ, matrices and flat parts; its in-place update of a fresh
// projection output; rows whose x needs no gradient; and its refusals of malformed arguments.
#include "model/lora_grad.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/torch_test_util.h"

namespace marlaas::model {
namespace {

using ::marlaas::testing::MaxAbsDiff;
using ::marlaas::testing::TorchErrorOf;

TEST(LoraGradTest, ForwardAndGradientsMatchLibTorchOps) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 10; ++trial) {
    const int64_t in = 5 + int64_t(rng() % 40), out = 3 + int64_t(rng() % 50);
    const bool flat = trial % 2 == 1, x_grad = trial % 3 != 2;
    std::vector<torch::Tensor> a, bt, a_leaf, bt_leaf;
    std::vector<float> scale;
    for (int j = 0; j < 3; ++j) {
      const int64_t rank = 1 + int64_t(rng() % 9);
      a_leaf.push_back(torch::randn({rank, in}).requires_grad_(true));
      bt_leaf.push_back(torch::randn({rank, out}).requires_grad_(true));
      a.push_back(flat ? a_leaf.back().view({-1}) : a_leaf.back());
      bt.push_back(flat ? bt_leaf.back().view({-1}) : bt_leaf.back());
      scale.push_back(0.5f + float(j));
    }
    // Adapters 0, 1, none, 0 again, an empty segment of 2, then 2.
    const std::vector<int32_t> adapter = {0, 1, -1, 0, 2, 2};
    std::vector<int32_t> start = {0};
    for (size_t s = 0; s < adapter.size(); ++s)
      start.push_back(start.back() + (s == 4 ? 0 : int32_t(1 + rng() % 7)));
    const int64_t rows = start.back();
    auto x = torch::randn({rows, in}).requires_grad_(x_grad);
    auto base = torch::randn({rows, out}).requires_grad_(true);
    auto probe = torch::randn({rows, out});
    // y: a fresh non-leaf (a projection's output): updated in place.
    auto y = base * 1.0;
    auto got = SegmentedLoraDelta(x, y, a, bt, scale, start, adapter);
    EXPECT_EQ(got.data_ptr(), y.data_ptr()) << "a fresh output is updated in place";
    (got * probe).sum().backward();
    const auto gx = x_grad ? x.grad().clone() : torch::Tensor();
    std::vector<torch::Tensor> ga, gbt;
    for (int j = 0; j < 3; ++j) {
      ga.push_back(a_leaf[size_t(j)].grad().clone());
      gbt.push_back(bt_leaf[size_t(j)].grad().clone());
      a_leaf[size_t(j)].grad().zero_();
      bt_leaf[size_t(j)].grad().zero_();
    }
    const auto gbase = base.grad().clone();
    if (x_grad) x.grad().zero_();
    base.grad().zero_();

    std::vector<torch::Tensor> want_parts;
    for (size_t s = 0; s < adapter.size(); ++s) {
      auto b = base.narrow(0, start[s], start[s + 1] - start[s]);
      if (adapter[s] >= 0) {
        const size_t j = size_t(adapter[s]);
        auto xs = x.narrow(0, start[s], start[s + 1] - start[s]);
        b = b + torch::matmul(torch::matmul(xs, a_leaf[j].t()), bt_leaf[j]) * scale[j];
      }
      want_parts.push_back(b);
    }
    auto want = torch::cat(want_parts, 0);
    (want * probe).sum().backward();
    EXPECT_LT(MaxAbsDiff(got.detach(), want.detach()), 1e-4) << "trial " << trial;
    EXPECT_LT(MaxAbsDiff(gbase, base.grad()), 1e-6) << "trial " << trial;
    if (x_grad) {
      EXPECT_LT(MaxAbsDiff(gx, x.grad()), 1e-4) << "trial " << trial;
    }
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_GT(a_leaf[j].grad().abs().max().item<double>(), 1e-3);
      EXPECT_LT(MaxAbsDiff(ga[j], a_leaf[j].grad()), 1e-4 * (1 + ga[j].abs().max().item<double>()))
          << "trial " << trial << " dA " << j;
      EXPECT_LT(MaxAbsDiff(gbt[j], bt_leaf[j].grad()),
                1e-4 * (1 + gbt[j].abs().max().item<double>()))
          << "trial " << trial << " dBt " << j;
    }
  }
}

TEST(LoraGradTest, ALeafThatRequiresGradIsNotUpdatedInPlace) {
  auto x = torch::randn({4, 6});
  auto y = torch::randn({4, 5}).requires_grad_(true);
  const auto before = y.detach().clone();
  auto a = torch::randn({2, 6}).requires_grad_(true), bt = torch::randn({2, 5});
  auto got = SegmentedLoraDelta(x, y, {a}, {bt}, {1.0f}, {0, 4}, {0});
  EXPECT_NE(got.data_ptr(), y.data_ptr());
  EXPECT_TRUE(torch::equal(y.detach(), before));
  EXPECT_GT(MaxAbsDiff(got.detach(), before), 1e-3);
}

TEST(LoraGradTest, MalformedArgumentsAreRefusedByName) {
  auto x = torch::randn({4, 6}), y = torch::randn({4, 5});
  auto a = torch::randn({2, 6}), bt = torch::randn({2, 5});
  EXPECT_NE(TorchErrorOf([&] {
              SegmentedLoraDelta(x.to(torch::kFloat64), y, {a}, {bt}, {1}, {0, 4}, {0});
            }).find("x and y must be f32"),
            std::string::npos);
  EXPECT_NE(TorchErrorOf([&] {
              SegmentedLoraDelta(x, y.narrow(0, 0, 3), {a}, {bt}, {1}, {0, 4}, {0});
            }).find("same rows"),
            std::string::npos);
  EXPECT_NE(TorchErrorOf([&] {
              SegmentedLoraDelta(x, y, {a}, {bt}, {1}, {0, 3}, {0});
            }).find("end at the last row"),
            std::string::npos);
  EXPECT_NE(TorchErrorOf([&] {
              SegmentedLoraDelta(x, y, {a}, {bt}, {1}, {0, 3, 2, 4}, {0, -1, 0});
            }).find("segment 1 ends before it starts"),
            std::string::npos);
  EXPECT_NE(TorchErrorOf([&] {
              SegmentedLoraDelta(x, y, {a}, {bt}, {1}, {0, 4}, {1});
            }).find("segment 0: adapter 1 out of range"),
            std::string::npos);
  EXPECT_NE(TorchErrorOf([&] {
              SegmentedLoraDelta(x, y, {a}, {torch::randn({3, 5})}, {1}, {0, 4}, {0});
            }).find("adapter 0: A must be [rank, in]"),
            std::string::npos);
  EXPECT_NE(TorchErrorOf([&] {
              SegmentedLoraDelta(x, y, {a}, {bt}, {}, {0, 4}, {0});
            }).find("one entry per adapter"),
            std::string::npos);
  EXPECT_NE(TorchErrorOf([&] {
              SegmentedLoraDelta(x, y, {torch::randn({65, 6})}, {torch::randn({65, 5})}, {1},
                                 {0, 4}, {0});
            }).find("rank 65 out of range"),
            std::string::npos);
  EXPECT_EQ(TorchErrorOf([&] { SegmentedLoraDelta(x, y, {a}, {bt}, {1}, {0, 4}, {0}); }), "");
}

}  // namespace
}  // namespace marlaas::model

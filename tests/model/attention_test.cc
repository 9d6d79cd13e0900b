// Attend's CPU op against the same attention in LibTorch ops, forward and gradients, on random
// inputs: grouped-query heads, a causal mask shared by every row, and per-row masks (a prefix of
// varying length, as HiddenShared's suffix rows have); and its refusals of malformed arguments.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/torch_test_util.h"

namespace marlaas::model {
namespace {

using ::marlaas::testing::MaxAbsDiff;
using ::marlaas::testing::TorchErrorOf;

// Attend on random q, k, v of these shapes against AttendWithLibTorch, forward and the gradients
// of a random projection of the output; returns Attend's key gradient.
torch::Tensor ExpectMatchesLibTorch(int64_t R, int64_t H, int64_t KV, int64_t T, int64_t S,
                                    int64_t D, const torch::Tensor& masked,
                                    const std::string& what) {
  auto q = torch::randn({R, H, T, D}).requires_grad_(true);
  auto k = torch::randn({R, KV, S, D}).requires_grad_(true);
  auto v = torch::randn({R, KV, S, D}).requires_grad_(true);
  auto probe = torch::randn({R, H, T, D});
  const double scale = 1.0 / std::sqrt(double(D));
  auto got = Attend(q, k, v, masked, scale);
  EXPECT_NE(got.grad_fn()->name().find("AttentionFn"), std::string::npos) << what;
  (got * probe).sum().backward();
  auto gq = q.grad().clone(), gk = k.grad().clone(), gv = v.grad().clone();
  q.grad().zero_();
  k.grad().zero_();
  v.grad().zero_();
  auto want = AttendWithLibTorch(q, k, v, masked, scale);
  (want * probe).sum().backward();
  EXPECT_LT(MaxAbsDiff(got.detach(), want.detach()), 1e-5) << what;
  EXPECT_LT(MaxAbsDiff(gq, q.grad()), 1e-4) << what;
  EXPECT_LT(MaxAbsDiff(gk, k.grad()), 1e-4) << what;
  EXPECT_LT(MaxAbsDiff(gv, v.grad()), 1e-4) << what;
  return gk;
}

TEST(AttentionTest, KernelOpMatchesLibTorchOpsWithGradients) {
  std::mt19937 rng(5);
  torch::manual_seed(5);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t R = 1 + rng() % 4, KV = 1 + rng() % 2, H = KV * (1 + rng() % 3);
    const int64_t T = 1 + rng() % 9, D = 4 + rng() % 29, prefix = trial % 2 == 1 ? rng() % 6 : 0;
    const int64_t S = prefix + T;
    // Queries at positions prefix..S-1: each row sees its first `seen[r]` prefix keys, then its
    // own keys up to itself.
    auto causal = torch::ones({T, T}, torch::kBool).triu(1);
    torch::Tensor masked;
    if (prefix == 0) {
      masked = causal.view({1, 1, T, T});
    } else {
      auto seen = torch::randint(0, prefix + 1, {R, 1});
      auto prefix_masked = torch::arange(prefix).unsqueeze(0) >= seen;  // [R, prefix]
      masked = torch::cat({prefix_masked.view({R, 1, 1, prefix}).expand({R, 1, T, prefix}),
                           causal.view({1, 1, T, T}).expand({R, 1, T, T})},
                          3);
    }
    const torch::Tensor gk =
        ExpectMatchesLibTorch(R, H, KV, T, S, D, masked, "trial " + std::to_string(trial));
    // Where every query sees one key, the softmax is 1 whatever the scores and dk = 0.
    const bool several_keys = (~masked).sum(-1).max().item<int64_t>() >= 2;
    if (several_keys) {
      EXPECT_GT(gk.abs().max().item<double>(), 1e-3) << "trial " << trial;
    }
  }
}

// The shapes pretraining and long completions give: sequences past any tile or block size of
// the kernels (33 to 300 positions), the tiny base's heads (4 query heads on 2 key heads of 32).
TEST(AttentionTest, LongSequencesMatchLibTorchOpsWithGradients) {
  torch::manual_seed(7);
  for (const int64_t T : {33, 64, 129, 300}) {
    auto masked = torch::ones({T, T}, torch::kBool).triu(1).view({1, 1, T, T});
    ExpectMatchesLibTorch(/*R=*/2, /*H=*/4, /*KV=*/2, T, T, /*D=*/32, masked,
                          "T " + std::to_string(T));
  }
}

TEST(AttentionTest, MalformedArgumentsAreRefusedByName) {
  auto q = torch::randn({2, 4, 3, 8}), k = torch::randn({2, 2, 5, 8}), v = k.clone();
  auto masked = torch::zeros({1, 1, 3, 5}, torch::kBool);
  auto error = [](auto f) { return TorchErrorOf(f); };
  EXPECT_EQ(error([&] { Attend(q, k, v, masked, 1.0); }), "");
  EXPECT_NE(error([&] {
              Attend(q, torch::randn({2, 3, 5, 8}), torch::randn({2, 3, 5, 8}), masked, 1.0);
            }).find("multiple of key/value heads"),
            std::string::npos);
  EXPECT_NE(error([&] { Attend(q, k, v.narrow(2, 0, 4), masked, 1.0); }).find("same shape"),
            std::string::npos);
  EXPECT_NE(error([&] { Attend(q, k, v, masked.to(torch::kFloat32), 1.0); }).find("masked must"),
            std::string::npos);
  EXPECT_NE(error([&] {
              Attend(q, k, v, torch::zeros({1, 1, 3, 4}, torch::kBool), 1.0);
            }).find("masked must"),
            std::string::npos);
  EXPECT_NE(error([&] { Attend(q[0], k, v, masked, 1.0); }).find("must be [rows, heads"),
            std::string::npos);
}

}  // namespace
}  // namespace marlaas::model

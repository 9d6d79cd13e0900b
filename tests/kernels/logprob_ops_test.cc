// Fused log-softmax + gather against the reference, and its backward against finite differences.
#include "kernels/logprob_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace marlaas::kernels {
namespace {

TEST(LogprobOpsTest, ForwardMatchesReferenceOnRandomLogits) {
  std::mt19937 rng(21);
  std::normal_distribution<float> d(0.f, 4.f);
  for (int trial = 0; trial < 20; ++trial) {
    LogprobProblem p;
    p.rows = 1 + int(rng() % 17);
    p.vocab = 1 + int(rng() % 5000);
    p.stride = p.vocab + int(rng() % 4);
    p.inv_temperature = 1.0f / (0.3f + float(rng() % 20) / 10.0f);
    std::vector<float> logits(size_t(p.rows) * size_t(p.stride));
    for (auto& v : logits) v = d(rng) + (trial == 0 ? 80.0f : 0.0f);  // large values too
    std::vector<int32_t> t(size_t(p.rows));
    for (auto& x : t) x = int32_t(rng() % uint32_t(p.vocab));
    std::vector<float> lp(t.size()), lse(t.size()), lp_ref(t.size()), lse_ref(t.size());
    TokenLogprobs(p, logits.data(), t.data(), lp.data(), lse.data());
    reference::TokenLogprobs(p, logits.data(), t.data(), lp_ref.data(), lse_ref.data());
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_NEAR(lp[i], lp_ref[i], 1e-4 * (1 + std::fabs(lp_ref[i])));
      EXPECT_NEAR(lse[i], lse_ref[i], 1e-4 * (1 + std::fabs(lse_ref[i])));
      EXPECT_LE(lp[i], 1e-6);
    }
  }
}

TEST(LogprobOpsTest, BackwardMatchesReferenceAndFiniteDifferences) {
  std::mt19937 rng(22);
  std::normal_distribution<float> d(0.f, 2.f);
  LogprobProblem p;
  p.rows = 3;
  p.vocab = 50;
  p.stride = 52;
  p.inv_temperature = 1.0f / 0.7f;
  std::vector<float> logits(size_t(p.rows) * size_t(p.stride));
  for (auto& v : logits) v = d(rng);
  std::vector<int32_t> t = {4, 0, 49};
  std::vector<float> g = {0.5f, -1.25f, 2.0f};
  std::vector<float> lp(3), lse(3);
  TokenLogprobs(p, logits.data(), t.data(), lp.data(), lse.data());
  std::vector<float> dl(logits.size(), 7.0f), dl_ref(logits.size(), 7.0f);
  TokenLogprobsBackward(p, logits.data(), t.data(), lse.data(), g.data(), dl.data());
  reference::TokenLogprobsBackward(p, logits.data(), t.data(), lse.data(), g.data(), dl_ref.data());
  for (int i = 0; i < p.rows; ++i) {
    for (int v = 0; v < p.vocab; ++v) {
      const size_t at = size_t(i) * size_t(p.stride) + size_t(v);
      EXPECT_NEAR(dl[at], dl_ref[at], 1e-5);
      // Central difference of g_i · logprob_i with respect to logits[i, v], in double.
      std::vector<float> plus = logits, minus = logits;
      const float h = 1e-2f;
      plus[at] += h;
      minus[at] -= h;
      std::vector<float> lp_plus(3), lp_minus(3);
      reference::TokenLogprobs(p, plus.data(), t.data(), lp_plus.data(), nullptr);
      reference::TokenLogprobs(p, minus.data(), t.data(), lp_minus.data(), nullptr);
      const double numeric =
          g[size_t(i)] * (double(lp_plus[size_t(i)]) - lp_minus[size_t(i)]) / (2 * h);
      EXPECT_NEAR(dl[at], numeric, 2e-3) << "row " << i << " token " << v;
    }
  }
}

}  // namespace
}  // namespace marlaas::kernels

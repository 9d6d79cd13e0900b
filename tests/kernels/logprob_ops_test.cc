// Fused log-softmax + gather against the reference, and its backward against finite differences.
#include "kernels/logprob_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Real vocabularies (Llama's 32000, Qwen2.5's 151936) with the strided layout, forward and
// backward against the reference; the vectorised exponential must not drift over long rows.
TEST(LogprobOpsTest, LargeVocabulariesMatchTheReference) {
  std::mt19937 rng(23);
  std::normal_distribution<float> d(0.f, 3.f);
  for (int32_t vocab : {32000, 151936}) {
    LogprobProblem p;
    p.rows = 3;
    p.vocab = vocab;
    p.stride = vocab + 5;
    p.inv_temperature = 1.0f / 0.8f;
    std::vector<float> logits(size_t(p.rows) * size_t(p.stride));
    for (auto& v : logits) v = d(rng);
    logits[7] = 40.0f;  // one token far above the rest
    const std::vector<int32_t> t = {7, int32_t(rng() % uint32_t(vocab)), vocab - 1};
    const std::vector<float> g = {1.0f, -0.5f, 2.0f};
    std::vector<float> lp(3), lse(3), lp_ref(3), lse_ref(3);
    TokenLogprobs(p, logits.data(), t.data(), lp.data(), lse.data());
    reference::TokenLogprobs(p, logits.data(), t.data(), lp_ref.data(), lse_ref.data());
    std::vector<float> dl(logits.size(), 7.0f), dl_ref(logits.size(), 7.0f);
    TokenLogprobsBackward(p, logits.data(), t.data(), lse.data(), g.data(), dl.data());
    reference::TokenLogprobsBackward(p, logits.data(), t.data(), lse_ref.data(), g.data(),
                                     dl_ref.data());
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(lp[i], lp_ref[i], 1e-4 * (1 + std::fabs(lp_ref[i]))) << "vocab " << vocab;
      // The sum of exponentials runs in double lanes: the float result is the reference's to
      // about an ulp.
      EXPECT_NEAR(lse[i], lse_ref[i], 2e-7 * (1 + std::fabs(lse_ref[i]))) << "vocab " << vocab;
      // Relative to each entry: the entries are g·softmax, 1e-5 of |g| or far less. A float
      // log-sum-exp near 20 is off by up to half an ulp (1e-6), and so is each exponential.
      double worst = 0;
      for (int32_t v = 0; v < vocab; ++v) {
        const size_t at = i * size_t(p.stride) + size_t(v);
        const double ref = dl_ref[at];
        worst = std::max(worst, std::fabs(double(dl[at]) - ref) / (std::fabs(ref) + 1e-30));
      }
      EXPECT_LE(worst, 1e-5) << "vocab " << vocab << " row " << i;
      // The padding between rows is never written.
      for (int64_t v = vocab; v < p.stride; ++v) {
        EXPECT_EQ(dl[i * size_t(p.stride) + size_t(v)], 7.0f);
      }
    }
  }
}

// One large term and thousands just under half an ulp of it in the same lane: float lanes
// dropped them (the log-sum-exp 1.4e-5 low); double lanes keep them.
TEST(LogprobOpsTest, ManySmallTermsBesideALargeOneAreNotLost) {
  LogprobProblem p;
  p.rows = 1;
  p.vocab = 4097;
  p.stride = 4097;
  std::vector<float> logits(4097, std::log(0.75f * 1.1920929e-7f));
  logits[0] = 0.0f;
  const int32_t t = 0;
  float lp, lse, lp_ref, lse_ref;
  TokenLogprobs(p, logits.data(), &t, &lp, &lse);
  reference::TokenLogprobs(p, logits.data(), &t, &lp_ref, &lse_ref);
  EXPECT_NEAR(lse, lse_ref, 2e-7);
  EXPECT_NEAR(lp, lp_ref, 2e-7);
  EXPECT_GT(lse_ref, 3e-4);  // what is at stake: 4096 terms of 8.9e-8
}

// A -inf logit (a token masked out) has probability 0: the row's results are the reference's and
// its gradient is 0 or within Exp's floor. A NaN logit makes its own row NaN and no other.
TEST(LogprobOpsTest, MaskedTokensAndNaNsStayInTheirRows) {
  std::mt19937 rng(24);
  std::normal_distribution<float> d(0.f, 2.f);
  LogprobProblem p;
  p.rows = 2;
  p.vocab = 300;
  p.stride = 300;
  std::vector<float> logits(600);
  for (auto& v : logits) v = d(rng);
  logits[11] = -INFINITY;
  logits[300 + 5] = std::nanf("");
  const std::vector<int32_t> t = {3, 3};
  const std::vector<float> g = {1.5f, 1.0f};
  std::vector<float> lp(2), lse(2), lp_ref(2), lse_ref(2);
  TokenLogprobs(p, logits.data(), t.data(), lp.data(), lse.data());
  reference::TokenLogprobs(p, logits.data(), t.data(), lp_ref.data(), lse_ref.data());
  EXPECT_NEAR(lp[0], lp_ref[0], 1e-5);
  EXPECT_NEAR(lse[0], lse_ref[0], 1e-5);
  EXPECT_TRUE(std::isnan(lp[1]));
  EXPECT_TRUE(std::isnan(lse[1]));
  std::vector<float> dl(600);
  TokenLogprobsBackward(p, logits.data(), t.data(), lse.data(), g.data(), dl.data());
  EXPECT_LE(std::fabs(dl[11]), 1.5f * 2.6e-38f);
  EXPECT_TRUE(std::isfinite(dl[12]));
}

}  // namespace
}  // namespace marlaas::kernels

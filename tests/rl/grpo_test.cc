// GRPO advantages and the clipped objective, against hand-computed values and gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "rl/advantages.h"
#include "rl/grpo_loss.h"

namespace marlaas::rl {
namespace {

TEST(AdvantagesTest, CenteredAndOptionallyNormalised) {
  auto g = ComputeAdvantages({1, 0, 0, 1}, false);
  EXPECT_FALSE(g.degenerate);
  EXPECT_EQ(g.advantages, (std::vector<float>{0.5f, -0.5f, -0.5f, 0.5f}));
  auto n = ComputeAdvantages({1, 0, 0, 1}, true);
  const float s = std::sqrt(1.0f / 3.0f);  // unbiased std of {1, 0, 0, 1}
  EXPECT_NEAR(n.std, s, 1e-6);
  EXPECT_NEAR(n.advantages[0], 0.5f / (s + 1e-6f), 1e-5);
  EXPECT_NEAR(n.advantages[1], -0.5f / (s + 1e-6f), 1e-5);
}

TEST(AdvantagesTest, EqualRewardsAreDegenerateWithZeroAdvantage) {
  for (bool norm : {false, true}) {
    auto g = ComputeAdvantages({0.3f, 0.3f, 0.3f}, norm);
    EXPECT_TRUE(g.degenerate);
    EXPECT_EQ(g.advantages, (std::vector<float>{0, 0, 0}));
  }
  EXPECT_TRUE(ComputeAdvantages({1}, true).degenerate);
}

TenantBatch Batch(torch::Tensor logp, torch::Tensor behaviour, torch::Tensor mask,
                  torch::Tensor adv) {
  return TenantBatch{logp, behaviour, mask, adv, torch::Tensor()};
}

// On-policy (rho = 1): L = -sum(m A) / sum(m), and dL/dlogp = -m A / sum(m).
TEST(GrpoLossTest, OnPolicyLossAndGradient) {
  auto logp = torch::tensor({{-1.0f, -2.0f, -0.5f}, {-0.3f, -0.7f, -1.1f}}).requires_grad_();
  auto mask = torch::tensor({{1.0f, 1.0f, 0.0f}, {1.0f, 1.0f, 1.0f}});
  auto adv = torch::tensor({2.0f, -1.0f});
  auto out = ComputeGrpoLoss(Batch(logp, logp.detach(), mask, adv), {});
  EXPECT_EQ(out.tokens, 5);
  EXPECT_NEAR(out.loss.item<double>(), -(2 * 2.0 + 3 * -1.0) / 5.0, 1e-6);
  out.loss.backward();
  auto want = -(mask * adv.unsqueeze(1)) / 5.0;
  EXPECT_TRUE(torch::allclose(logp.grad(), want, 1e-6, 1e-7));
  EXPECT_EQ(out.clip_fraction, 0.0);
}

// Ratios beyond the clip range in the direction of the advantage get no gradient.
TEST(GrpoLossTest, ClippedTokensGetNoGradient) {
  GrpoConfig c;  // eps_low 0.2, eps_high 0.28
  const float lo = std::log(0.5f), hi = std::log(1.5f), in = std::log(1.1f);
  // Row 0: A > 0 with ratios 1.5 (clipped), 1.1 (inside), 0.5 (below, not clipped for A > 0).
  // Row 1: A < 0 with ratios 0.5 (clipped), 1.1 (inside), 1.5 (above, not clipped for A < 0).
  auto logp = torch::tensor({{hi, in, lo}, {lo, in, hi}}).requires_grad_();
  auto behaviour = torch::zeros({2, 3});
  auto out =
      ComputeGrpoLoss(Batch(logp, behaviour, torch::ones({2, 3}), torch::tensor({1.0f, -1.0f})), c);
  out.loss.backward();
  auto g = logp.grad();
  EXPECT_EQ(g[0][0].item<float>(), 0.0f);
  EXPECT_EQ(g[1][0].item<float>(), 0.0f);
  EXPECT_NEAR(g[0][1].item<float>(), -1.1f / 6, 1e-6);  // d(-rho A / n)/dlogp = -rho A / n
  EXPECT_NEAR(g[0][2].item<float>(), -0.5f / 6, 1e-6);
  EXPECT_NEAR(g[1][1].item<float>(), 1.1f / 6, 1e-6);
  EXPECT_NEAR(g[1][2].item<float>(), 1.5f / 6, 1e-6);
  EXPECT_NEAR(out.clip_fraction, 4.0 / 6.0, 1e-9);  // ratios 1.5 and 0.5 lie outside the range
  // The loss uses the pessimistic (clipped) value for the clipped tokens.
  const double want = -(1.28 + 1.1 + 0.5 - 0.8 - 1.1 - 1.5) / 6;
  EXPECT_NEAR(out.loss.item<double>(), want, 1e-6);
}

TEST(GrpoLossTest, KlK3IsZeroAtTheReferenceAndPositiveAway) {
  GrpoConfig c;
  c.kl_beta = 0.5f;
  auto logp = torch::tensor({{-1.0f, -2.0f}}).requires_grad_();
  TenantBatch b = Batch(logp, logp.detach(), torch::ones({1, 2}), torch::tensor({0.0f}));
  b.ref_logprobs = logp.detach().clone();
  EXPECT_NEAR(ComputeGrpoLoss(b, c).mean_kl, 0.0, 1e-9);
  b.ref_logprobs = torch::tensor({{-1.5f, -1.0f}});
  auto out = ComputeGrpoLoss(b, c);
  const double d0 = -0.5, d1 = 1.0;
  const double kl = ((std::exp(d0) - d0 - 1) + (std::exp(d1) - d1 - 1)) / 2;
  EXPECT_NEAR(out.mean_kl, kl, 1e-6);
  EXPECT_NEAR(out.loss.item<double>(), 0.5 * kl, 1e-6);
}

// Tokens left out of the batch (a step's degenerate groups) count in the mean: the objective and
// the KL term are divided by all the step's tokens; the reported KL stays the batch's own mean.
TEST(GrpoLossTest, SkippedTokensCountInTheMeanButNotInTheReportedKl) {
  GrpoConfig c;
  c.kl_beta = 0.5f;
  auto logp = torch::tensor({{-1.0f, -2.0f}}).requires_grad_();
  TenantBatch b = Batch(logp, logp.detach(), torch::ones({1, 2}), torch::tensor({1.0f}));
  b.ref_logprobs = torch::tensor({{-1.5f, -1.0f}});
  const GrpoLoss own = ComputeGrpoLoss(b, c);
  b.skipped_tokens = 6;
  const GrpoLoss with = ComputeGrpoLoss(b, c);
  EXPECT_NEAR(with.loss.item<double>(), own.loss.item<double>() * 2 / 8, 1e-6);
  EXPECT_NEAR(with.mean_kl, own.mean_kl, 1e-9);
  EXPECT_GT(own.mean_kl, 0.1);
  EXPECT_EQ(with.tokens, 2);
}

// Each tenant's loss is normalised by its own token count: adding tokens to tenant B leaves the
// gradient tenant A receives from the summed loss unchanged.
TEST(GrpoLossTest, SummedTenantLossesGiveEachTenantItsOwnGradient) {
  auto a = torch::tensor({{-1.0f, -2.0f}}).requires_grad_();
  auto a_alone = a.detach().clone().requires_grad_();
  auto b_small = torch::tensor({{-0.5f}}).requires_grad_();
  auto b_big = torch::full({4, 7}, -0.5f).requires_grad_();
  const auto adv_a = torch::tensor({1.5f});
  auto loss_a = [&](const torch::Tensor& lp) {
    return ComputeGrpoLoss(Batch(lp, lp.detach(), torch::ones({1, 2}), adv_a), {}).loss;
  };
  (loss_a(a) +
   ComputeGrpoLoss(Batch(b_big, b_big.detach(), torch::ones({4, 7}), torch::ones({4})), {}).loss)
      .backward();
  (loss_a(a_alone) +
   ComputeGrpoLoss(Batch(b_small, b_small.detach(), torch::ones({1, 1}), torch::ones({1})), {})
       .loss)
      .backward();
  EXPECT_TRUE(torch::equal(a.grad(), a_alone.grad()));
}

}  // namespace
}  // namespace marlaas::rl

// GRPO advantages and the clipped objective, against hand-computed values and gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "rl/advantages.h"
#include "rl/grpo_loss.h"
#include "tests/torch_test_util.h"

namespace marlaas::rl {
namespace {

using ::marlaas::testing::TorchErrorOf;

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

// The KL term is computed at trained positions only: at a masked one (prompt, tool result,
// padding) the policy may be far below the reference (exp(ref - logp) = inf in float), which
// times its mask of 0 made the loss and the gradient NaN.
TEST(GrpoLossTest, KlStaysFiniteWhereAMaskedPositionIsFarFromTheReference) {
  GrpoConfig c;
  c.kl_beta = 0.1f;
  auto logp = torch::tensor({{-200.0f, -1.0f}}).requires_grad_();
  TenantBatch b = Batch(logp, logp.detach(), torch::tensor({{0.0f, 1.0f}}), torch::tensor({1.0f}));
  b.ref_logprobs = torch::tensor({{0.0f, -1.5f}});
  auto out = ComputeGrpoLoss(b, c);
  ASSERT_TRUE(std::isfinite(out.loss.item<double>()));
  out.loss.backward();
  EXPECT_TRUE(torch::isfinite(logp.grad()).all().item<bool>()) << logp.grad();
  EXPECT_EQ(logp.grad()[0][0].item<float>(), 0.0f);  // no gradient where nothing is trained
  const double d = -0.5;                             // the trained position's ref - logp
  EXPECT_NEAR(out.mean_kl, std::exp(d) - d - 1, 1e-6);
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

// Several tenants' rows in one ComputeGrpoLosses (as MultiTenantStep's buckets): interleaved rows,
// each tenant's own clip range, KL coefficient and skipped tokens, and a tenant whose rows train
// no token. Each tenant's statistics, and the gradient its rows get, are those of ComputeGrpoLoss
// on its rows alone; the loss is their sum.
TEST(GrpoLossTest, ManyTenantsAtOnceEqualEachTenantAlone) {
  torch::manual_seed(4);
  const int64_t rows = 7, len = 5;
  auto logp = (torch::randn({rows, len}) * 0.3 - 1).requires_grad_();
  const auto behaviour = logp.detach() + torch::randn({rows, len}) * 0.4;  // some clip
  const auto ref = logp.detach() + torch::randn({rows, len}) * 0.2;
  auto mask = (torch::rand({rows, len}) > 0.3).to(torch::kFloat32);
  mask[6].zero_();
  const auto adv = torch::randn({rows});
  const std::vector<int32_t> tenant_of = {0, 1, 0, 2, 1, 0, 3};  // tenant 3: no tokens
  std::vector<GrpoConfig> configs(4);
  configs[0].kl_beta = 0.3f;
  configs[1].clip_eps_low = 0.05f;
  configs[1].clip_eps_high = 0.1f;
  configs[2].kl_beta = 0.1f;
  configs[2].clip_eps_high = 0.5f;
  const std::vector<int64_t> skipped = {0, 4, 9, 2};
  TenantBatch all{logp, behaviour, mask, adv, ref};
  const GrpoLosses got = ComputeGrpoLosses(all, tenant_of, configs, skipped);
  got.loss.backward();
  const auto grad = logp.grad().clone();
  double sum = 0;
  for (int32_t k = 0; k < 4; ++k) {
    std::vector<int64_t> mine;
    for (int64_t r = 0; r < rows; ++r)
      if (tenant_of[size_t(r)] == k) mine.push_back(r);
    const auto idx = torch::tensor(mine);
    auto own = logp.detach().index_select(0, idx).requires_grad_();
    TenantBatch b{own, behaviour.index_select(0, idx), mask.index_select(0, idx),
                  adv.index_select(0, idx), ref.index_select(0, idx)};
    b.skipped_tokens = skipped[size_t(k)];
    const GrpoLoss want = ComputeGrpoLoss(b, configs[size_t(k)]);
    want.loss.backward();
    const GrpoLoss& g = got.tenants[size_t(k)];
    // And the objective written out, element by element (grpo_loss.h), apart from both.
    const GrpoConfig& c = configs[size_t(k)];
    double plain = 0, n = double(skipped[size_t(k)]);
    for (int64_t r : mine) {
      for (int64_t t = 0; t < len; ++t) {
        const double m = mask[r][t].item<double>(), lp = logp[r][t].item<double>();
        const double rho = std::exp(lp - behaviour[r][t].item<double>()), a = adv[r].item<double>();
        const double clipped = std::min(std::max(rho, 1.0 - c.clip_eps_low), 1.0 + c.clip_eps_high);
        const double d = ref[r][t].item<double>() - lp;
        plain += m * (-std::min(rho * a, clipped * a) + c.kl_beta * (std::exp(d) - d - 1));
        n += m;
      }
    }
    EXPECT_NEAR(g.value, n > 0 ? plain / n : 0.0, 1e-5) << k;
    EXPECT_EQ(g.tokens, want.tokens) << k;
    EXPECT_NEAR(g.value, want.loss.item<double>(), 1e-6) << k;
    EXPECT_NEAR(g.value, want.value, 1e-12) << k;
    EXPECT_NEAR(g.clip_fraction, want.clip_fraction, 1e-9) << k;
    EXPECT_NEAR(g.mean_kl, want.mean_kl, 1e-9) << k;
    EXPECT_LT((grad.index_select(0, idx) - own.grad()).abs().max().item<double>(), 1e-7) << k;
    sum += want.loss.item<double>();
  }
  EXPECT_NEAR(got.loss.item<double>(), sum, 1e-6);
  EXPECT_EQ(got.tenants[3].tokens, 0);
  EXPECT_GT(got.tenants[1].clip_fraction, 0);  // the narrow clip range bites
  EXPECT_GT(got.tenants[0].mean_kl, 0);
  EXPECT_EQ(got.tenants[1].mean_kl, 0);  // no KL term: not computed
}

TEST(GrpoLossTest, ManyTenantsRefuseMismatchedArguments) {
  auto logp = torch::zeros({2, 3});
  TenantBatch b{logp, logp, torch::ones({2, 3}), torch::ones({2}), torch::Tensor()};
  auto error = [&](const std::vector<int32_t>& of, const std::vector<GrpoConfig>& c,
                   const std::vector<int64_t>& skipped) {
    return TorchErrorOf([&] { ComputeGrpoLosses(b, of, c, skipped); });
  };
  EXPECT_EQ(error({0, 1}, {{}, {}}, {0, 0}), "");
  EXPECT_NE(error({0}, {{}}, {0}).find("one tenant per completion"), std::string::npos);
  EXPECT_NE(error({0, 2}, {{}, {}}, {0, 0}).find("tenant out of range"), std::string::npos);
  EXPECT_NE(error({0, 0}, {{}}, {}).find("one skipped-token count per tenant"), std::string::npos);
  EXPECT_NE(error({0, 0}, {{}}, {-1}).find("must not be negative"), std::string::npos);
  GrpoConfig kl;
  kl.kl_beta = 0.1f;
  EXPECT_NE(error({0, 0}, {kl}, {0}).find("needs reference log-probs"), std::string::npos);
}

}  // namespace
}  // namespace marlaas::rl

// The sampling weights against the reference on random rows, at the block and lane edges and at
// real vocabulary sizes, and their rules for ties, -inf and NaN logits.
#include "kernels/sampling_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace marlaas::kernels {
namespace {

void ExpectMatchesReference(const std::vector<float>& logits, float inv_t) {
  const int32_t n = int32_t(logits.size());
  std::vector<float> w(logits.size()), w_ref(logits.size());
  const SamplingWeights got = ComputeSamplingWeights(logits.data(), n, inv_t, w.data());
  const SamplingWeights want =
      reference::ComputeSamplingWeights(logits.data(), n, inv_t, w_ref.data());
  ASSERT_EQ(got.max, want.max);
  ASSERT_EQ(got.argmax, want.argmax);
  EXPECT_EQ(w[size_t(got.argmax)], 1.0f);
  EXPECT_NEAR(got.sum, want.sum, 1e-5 * want.sum) << "n " << n;
  // The sum of the kernel's own weights, added one by one in long double: the lanes lose nothing
  // a draw could notice (float lanes were off by up to 1.4e-5).
  long double exact = 0;
  for (float x : w) exact += x;
  EXPECT_NEAR(got.sum, double(exact), 1e-12 * double(exact)) << "n " << n;
  for (size_t v = 0; v < w.size(); ++v) {
    if (w[v] == 0 || w_ref[v] == 0) {  // the floor: e^-86.6 on one side and 0 on the other
      ASSERT_LE(std::max(w[v], w_ref[v]), 2.5e-38f) << "n " << n << " token " << v;
    } else {
      // Exp is within 2 ulp; the exponent itself is rounded in float (up to 1e-5 relative
      // near the floor).
      ASSERT_NEAR(w[v], w_ref[v], 1e-5f * w_ref[v]) << "n " << n << " token " << v;
    }
  }
}

TEST(SamplingOpsTest, WeightsMatchTheReferenceOnRandomRows) {
  std::mt19937 rng(31);
  for (int32_t n : {1, 2, 15, 16, 17, 31, 100, 4095, 4096, 4097, 10000, 32000, 151936}) {
    for (float sigma : {0.05f, 2.0f, 30.0f}) {
      std::normal_distribution<float> d(0.f, sigma);
      std::vector<float> logits(static_cast<size_t>(n));
      for (auto& x : logits) x = d(rng);
      const float inv_t = 1.0f / (0.2f + float(rng() % 20) / 10.0f);
      ExpectMatchesReference(logits, inv_t);
      // A language model's row: a few tokens far above the rest.
      for (int i = 0; i < 8; ++i) logits[rng() % uint32_t(n)] += 10.0f + float(i);
      ExpectMatchesReference(logits, inv_t);
    }
  }
}

// One weight of 1 and thousands just under half an ulp of it, in the same float lane: a float
// lane sum dropped them all (1.4e-5 of the total), so tokens at the end could never be drawn.
TEST(SamplingOpsTest, ManyTinyWeightsBesideALargeOneAreNotLost) {
  for (float tiny : {5.5e-8f, 0.75f * 1.1920929e-7f}) {
    std::vector<float> logits(4097, std::log(tiny));
    logits[0] = 0.0f;
    logits[4096] = std::log(1e-5f);
    ExpectMatchesReference(logits, 1.0f);
  }
}

TEST(SamplingOpsTest, TiesMinusInfinityAndNaN) {
  // The first of tied maxima is the argmax.
  std::vector<float> tied = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
  ExpectMatchesReference(tied, 1.0f);
  std::vector<float> w(5);
  EXPECT_EQ(ComputeSamplingWeights(tied.data(), 5, 1.0f, w.data()).argmax, 1);
  // A -inf logit (a token masked out) weighs exactly 0, so it is never drawn, and so does one
  // more than 86.6 below the maximum after the temperature.
  std::vector<float> masked(40, 0.5f);
  masked[3] = -std::numeric_limits<float>::infinity();
  masked[9] = -100.0f;
  masked[20] = 4.0f;
  ExpectMatchesReference(masked, 1.0f);
  std::vector<float> mw(40);
  const SamplingWeights s = ComputeSamplingWeights(masked.data(), 40, 1.0f, mw.data());
  EXPECT_EQ(mw[3], 0.0f);
  EXPECT_EQ(mw[9], 0.0f);
  EXPECT_EQ(s.argmax, 20);
  // A NaN logit is passed over by the max and its own weight is NaN, so the sum is NaN.
  std::vector<float> with_nan(40, 0.5f);
  with_nan[0] = std::numeric_limits<float>::quiet_NaN();
  with_nan[30] = 2.0f;
  std::vector<float> nw(40);
  const SamplingWeights t = ComputeSamplingWeights(with_nan.data(), 40, 1.0f, nw.data());
  EXPECT_EQ(t.max, 2.0f);
  EXPECT_EQ(t.argmax, 30);
  EXPECT_TRUE(std::isnan(nw[0]));
  EXPECT_EQ(nw[30], 1.0f);
  EXPECT_TRUE(std::isnan(t.sum));
  // No logit above -inf: argmax 0 and every weight NaN, as in the reference.
  std::vector<float> none(20, -std::numeric_limits<float>::infinity());
  none[7] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> zw(20), zw_ref(20);
  const SamplingWeights u = ComputeSamplingWeights(none.data(), 20, 1.0f, zw.data());
  const SamplingWeights u_ref =
      reference::ComputeSamplingWeights(none.data(), 20, 1.0f, zw_ref.data());
  EXPECT_EQ(u.argmax, 0);
  EXPECT_EQ(u_ref.argmax, 0);
  EXPECT_EQ(u.max, -std::numeric_limits<float>::infinity());
  for (size_t v = 0; v < 20; ++v) EXPECT_TRUE(std::isnan(zw[v]) && std::isnan(zw_ref[v]));
}

}  // namespace
}  // namespace marlaas::kernels

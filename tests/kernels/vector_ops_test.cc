// The CPU kernels' vector helpers against the plain library: the branch-free exponential within
// 2 ulp of std::exp over the range it covers (and its floor below), the lane sums and
// maxima against plain loops.
#include "kernels/cpu/vector_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace marlaas::kernels {
namespace {

// Exp as the kernels run it: in a loop of a cloned function, so the clone this machine picks
// (AVX-512 or AVX2 with FMA, vectorised and contracted) is what is checked.
MARLAAS_CLONES void ExpAll(const float* x, float* y, int32_t n) {
  for (int32_t i = 0; i < n; ++i) y[i] = Exp(x[i]);
}

TEST(VectorOpsTest, ExpIsWithinTwoUlpOfTheLibrary) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> x_of(-86.6f, 88.3f);
  std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 88.3f, -86.6f, 1e-8f, -1e-8f};
  for (int i = 0; i < 200000; ++i) xs.push_back(x_of(rng));
  std::vector<float> cloned(xs.size());
  ExpAll(xs.data(), cloned.data(), int32_t(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i], want = std::exp(x);
    for (float got : {Exp(x), cloned[i]}) {
      ASSERT_LE(std::fabs(got - want), 2.0f * (std::nextafter(want, INFINITY) - want))
          << "x = " << x << ": " << got << " against " << want;
    }
  }
  // The top of the range stays finite, and NaN stays NaN.
  EXPECT_TRUE(std::isfinite(Exp(88.37f)));
  EXPECT_TRUE(std::isfinite(Exp(1e30f)));
  EXPECT_TRUE(std::isnan(Exp(std::numeric_limits<float>::quiet_NaN())));
  const float nan_in[] = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
  float nan_out[2];
  ExpAll(nan_in, nan_out, 2);
  EXPECT_TRUE(std::isnan(nan_out[0]));
  // Below: the floor, never 0, a subnormal or a NaN.
  for (float x : {-86.7f, -87.4f, -100.0f, -1e30f, -INFINITY}) {
    EXPECT_EQ(Exp(x), Exp(-86.6f)) << x;
    EXPECT_GT(Exp(x), 0.0f);
    EXPECT_TRUE(std::isnormal(Exp(x))) << x;
  }
}

TEST(VectorOpsTest, SumAndMaxMatchPlainLoops) {
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.f, 1.f);
  for (int32_t n = 0; n < 70; ++n) {
    std::vector<float> x(static_cast<size_t>(n));
    double sum = 0;
    float max = -INFINITY;
    for (float& e : x) {
      e = d(rng);
      sum += e;
      max = std::max(max, e);
    }
    EXPECT_NEAR(Sum(x.data(), n), sum, 1e-5 * (1 + std::fabs(sum))) << n;
    EXPECT_EQ(Max(x.data(), n), max) << n;
  }
}

}  // namespace
}  // namespace marlaas::kernels

// The sampler: its distribution and behaviour log-probs, and its partial sort of top-k/top-p
// candidates against the reference's full sort, token for token.
#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace marlaas::model {
namespace {

// The sampler's empirical distribution matches softmax(logits / T), truncation is respected, and
// the reported log-prob is the untruncated temperature-scaled one.
TEST(SamplerTest, SamplesFollowTheTemperatureScaledDistribution) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, -1.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  SamplerRng rng(5);
  std::vector<double> want(logits.size());
  double z = 0;
  for (size_t v = 0; v < logits.size(); ++v) z += want[v] = std::exp(logits[v] / 0.7);
  for (auto& x : want) x /= z;
  std::vector<int> hits(logits.size());
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    Sampled s = SampleToken(logits.data(), 5, p, &rng);
    ++hits[size_t(s.token)];
    ASSERT_NEAR(s.logprob, std::log(want[size_t(s.token)]), 1e-5);
  }
  for (size_t v = 0; v < logits.size(); ++v) {
    EXPECT_NEAR(double(hits[v]) / n, want[v], 0.005) << "token " << v;
  }
  // Under truncation the reported log-prob is still log softmax(logits / T) over the whole
  // vocabulary, not the log of the renormalised truncated distribution.
  p.top_k = 2;
  for (int i = 0; i < 2000; ++i) {
    Sampled s = SampleToken(logits.data(), 5, p, &rng);
    ASSERT_LT(s.token, 2);
    ASSERT_NEAR(s.logprob, std::log(want[size_t(s.token)]), 1e-5) << "top-k, token " << s.token;
  }
  p.top_k = 0;
  p.top_p = 0.5f;  // token 0 alone holds more than half the mass at T = 0.7
  for (int i = 0; i < 2000; ++i) {
    Sampled s = SampleToken(logits.data(), 5, p, &rng);
    ASSERT_EQ(s.token, 0);
    ASSERT_NEAR(s.logprob, std::log(want[0]), 1e-5) << "top-p";
  }
  p.greedy = true;
  EXPECT_EQ(SampleToken(logits.data(), 5, p, &rng).token, 0);
}

// Logits of one of several shapes: peaked like a language model's (a few large, a long tail),
// flat, or coarse (many exact ties, so the order by token id decides).
std::vector<float> RandomLogits(int32_t vocab, int shape, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (auto& x : logits) {
    switch (shape) {
      case 0:
        x = 3.0f * normal(*rng);
        break;
      case 1:
        x = 0.05f * normal(*rng);
        break;
      default:
        x = float(int((*rng)() % 7));
        break;
    }
  }
  if (shape == 0) {
    for (int i = 0; i < 5; ++i) logits[(*rng)() % uint32_t(vocab)] += 12.0f;
  }
  return logits;
}

// Both samplers from the same stream state: the same token and the same log-prob, bit for bit.
void ExpectSamePicks(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed,
                     int draws) {
  SamplerRng fast(seed), slow(seed);
  const int32_t vocab = int32_t(logits.size());
  for (int i = 0; i < draws; ++i) {
    const Sampled a = SampleToken(logits.data(), vocab, p, &fast);
    const Sampled b = reference::SampleToken(logits.data(), vocab, p, &slow);
    ASSERT_EQ(a.token, b.token) << "vocab " << vocab << " top_k " << p.top_k << " top_p " << p.top_p
                                << " T " << p.temperature << " draw " << i;
    if (std::isnan(b.logprob)) {
      ASSERT_TRUE(std::isnan(a.logprob));
    } else {
      ASSERT_EQ(a.logprob, b.logprob) << "token " << a.token;
    }
  }
}

TEST(SamplerTest, PicksTheReferencesTokensAtEveryCut) {
  std::mt19937 rng(77);
  for (int32_t vocab : {1, 2, 63, 64, 65, 130, 1000, 5003}) {
    for (int shape = 0; shape < 3; ++shape) {
      const std::vector<float> logits = RandomLogits(vocab, shape, &rng);
      for (int32_t k : {0, 1, 5, 63, 64, 65, 129, vocab - 1, vocab, vocab + 3}) {
        for (float top_p : {1.0f, 0.999f, 0.9f, 0.5f, 1e-6f}) {
          SamplingParams p;
          p.top_k = k;
          p.top_p = top_p;
          p.temperature = 0.3f + float(rng() % 20) / 10.0f;
          ExpectSamePicks(logits, p, rng(), vocab > 1000 ? 6 : 20);
        }
      }
    }
  }
  // Qwen2.5's vocabulary, fewer settings: the reference sorts all of it for every pick.
  for (int shape = 0; shape < 3; ++shape) {
    const std::vector<float> logits = RandomLogits(151936, shape, &rng);
    for (int32_t k : {0, 50, 151935}) {
      for (float top_p : {1.0f, 0.95f, 0.5f}) {
        SamplingParams p;
        p.top_k = k;
        p.top_p = top_p;
        ExpectSamePicks(logits, p, rng(), 2);
      }
    }
  }
}

// The draw both samplers share, on weights with zeros and a NaN, in id order and in a given order.
TEST(SamplerTest, TheDrawNeverReturnsATokenOfWeightZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> w = {0.0f, 2.0f, 0.0f, 1.0f, nan, 0.0f};
  EXPECT_EQ(DrawToken(w.data(), nullptr, 6, 0.0), 1);  // u = 0: not token 0, of weight 0
  EXPECT_EQ(DrawToken(w.data(), nullptr, 6, 2.0), 1);  // reaches 0 exactly at token 1
  EXPECT_EQ(DrawToken(w.data(), nullptr, 6, 2.5), 3);
  EXPECT_EQ(DrawToken(w.data(), nullptr, 6, 3.0), 3);
  EXPECT_EQ(DrawToken(w.data(), nullptr, 6, 3.0 + 1e-9), 3);  // rounding left mass: the last
  EXPECT_EQ(DrawToken(w.data(), nullptr, 6, 100.0), 3);       // of positive weight, not 4 or 5
  const std::vector<int32_t> order = {5, 3, 2, 1};
  EXPECT_EQ(DrawToken(w.data(), order.data(), 4, 0.5), 3);
  EXPECT_EQ(DrawToken(w.data(), order.data(), 4, 1.5), 1);
  EXPECT_EQ(DrawToken(w.data(), order.data(), 4, 50.0), 1);
  const std::vector<float> none = {0.0f, nan, 0.0f};
  EXPECT_EQ(DrawToken(none.data(), nullptr, 3, 0.3), 2);  // nothing positive: the last token
}

// Masked tokens (-inf logits) at the end of a row whose other weights are one large and thousands
// tiny ones (where a float sum of the weights was 7.6e-6 too high, and the draw ran past the
// last real token into the masked ones 9 times in a million): never drawn, with or without a cut.
TEST(SamplerTest, AMaskedTokenIsNeverDrawn) {
  std::vector<float> logits(4100, std::log(0.75f * 1.1920929e-7f));
  logits[0] = 0.0f;
  for (size_t v = 4096; v < 4100; ++v) logits[v] = -std::numeric_limits<float>::infinity();
  for (int32_t k : {0, 4099}) {
    SamplingParams p;
    p.top_k = k;
    SamplerRng rng(11);
    for (int i = 0; i < (k == 0 ? 5000 : 1000); ++i) {
      ASSERT_LT(SampleToken(logits.data(), 4100, p, &rng).token, 4096) << "draw " << i;
    }
  }
}

// A NaN logit (a model that diverged) gives a defined token on both, never a sort with an
// inconsistent order (undefined behaviour in std::sort).
TEST(SamplerTest, ANaNLogitGivesTheReferencesTokenAndANaNLogprob) {
  std::mt19937 rng(78);
  std::vector<float> logits = RandomLogits(300, 0, &rng);
  logits[17] = std::numeric_limits<float>::quiet_NaN();
  logits[200] = std::numeric_limits<float>::quiet_NaN();
  for (int32_t k : {0, 10, 100}) {
    for (float top_p : {1.0f, 0.9f}) {
      SamplingParams p;
      p.top_k = k;
      p.top_p = top_p;
      ExpectSamePicks(logits, p, rng(), 20);
      SamplerRng r(3);
      EXPECT_TRUE(std::isnan(SampleToken(logits.data(), 300, p, &r).logprob));
    }
  }
}

}  // namespace
}  // namespace marlaas::model

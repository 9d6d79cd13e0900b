// The CPU attention kernels against the plain reference, on random shapes (grouped-query heads,
// head sizes that are not a multiple of the vector width), random masks shared by every row or
// per row, and query positions whose every key is masked.
#include "kernels/attention_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

namespace marlaas::kernels {
namespace {

std::vector<float> Random(std::mt19937& rng, size_t n) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                 int trial) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 2e-4f * (1.0f + std::fabs(want[i])))
        << what << " at " << i << ", trial " << trial;
  }
}

// Random q, k, v and output gradient for p (its mask set): the forward and backward against the
// reference, from outputs that start as garbage (the kernels must write every element). A masked
// key's probability is exactly 0, and so is the output of a position that attends to nothing.
void CheckAgainstTheReference(const AttentionProblem& p, std::mt19937& rng, int trial) {
  const size_t plane = size_t(p.q_len) * size_t(p.kv_len);
  const size_t nq = size_t(p.rows) * size_t(p.heads) * size_t(p.q_len) * size_t(p.head_dim);
  const size_t nkv = size_t(p.rows) * size_t(p.kv_heads) * size_t(p.kv_len) * size_t(p.head_dim);
  const size_t np = size_t(p.rows) * size_t(p.heads) * plane;
  const auto q = Random(rng, nq), k = Random(rng, nkv), v = Random(rng, nkv);
  const auto d_out = Random(rng, nq);
  std::vector<float> out = Random(rng, nq), probs = Random(rng, np), out_ref(nq), probs_ref(np);
  AttentionForward(p, q.data(), k.data(), v.data(), out.data(), probs.data());
  reference::AttentionForward(p, q.data(), k.data(), v.data(), out_ref.data(), probs_ref.data());
  ExpectClose(probs, probs_ref, "probs", trial);
  ExpectClose(out, out_ref, "out", trial);
  for (size_t i = 0; i < np; i += size_t(p.kv_len)) {  // i: a position's first probability
    const size_t row = i / (size_t(p.heads) * plane);
    const bool* m = p.masked + (p.mask_per_row ? row * plane : 0) + i % plane;
    bool attends = false;
    for (int32_t j = 0; j < p.kv_len; ++j) {
      attends = attends || !m[j];
      if (m[j]) {
        ASSERT_EQ(probs[i + size_t(j)], 0.0f) << "masked, at " << i + size_t(j);
      }
    }
    for (int32_t d = 0; d < p.head_dim && !attends; ++d) {
      ASSERT_EQ(out[i / size_t(p.kv_len) * size_t(p.head_dim) + size_t(d)], 0.0f)
          << "nothing attended, trial " << trial;
    }
  }
  std::vector<float> dq = Random(rng, nq), dk = Random(rng, nkv), dv = Random(rng, nkv);
  std::vector<float> dq_ref(nq), dk_ref(nkv), dv_ref(nkv);
  AttentionBackward(p, q.data(), k.data(), v.data(), probs_ref.data(), d_out.data(), dq.data(),
                    dk.data(), dv.data());
  reference::AttentionBackward(p, q.data(), k.data(), v.data(), probs_ref.data(), d_out.data(),
                               dq_ref.data(), dk_ref.data(), dv_ref.data());
  ExpectClose(dq, dq_ref, "dq", trial);
  ExpectClose(dk, dk_ref, "dk", trial);
  ExpectClose(dv, dv_ref, "dv", trial);
}

TEST(AttentionOpsTest, ForwardAndBackwardMatchTheReference) {
  std::mt19937 rng(21);
  for (int trial = 0; trial < 40; ++trial) {
    AttentionProblem p;
    p.rows = 1 + int32_t(rng() % 4);
    p.kv_heads = 1 + int32_t(rng() % 3);
    p.heads = p.kv_heads * (1 + int32_t(rng() % 3));
    p.q_len = 1 + int32_t(rng() % 12);
    p.kv_len = 1 + int32_t(rng() % 20);
    p.head_dim = 1 + int32_t(rng() % 40);
    p.scale = 1.0f / std::sqrt(float(p.head_dim));
    p.mask_per_row = trial % 2 == 1;
    const size_t planes = p.mask_per_row ? size_t(p.rows) : 1;
    const size_t plane = size_t(p.q_len) * size_t(p.kv_len);
    std::unique_ptr<bool[]> masked(new bool[planes * plane]);
    for (size_t i = 0; i < planes * plane; ++i) masked[i] = rng() % 3 == 0;
    // Query position 0 of the first plane attends to nothing.
    for (int32_t j = 0; j < p.kv_len; ++j) masked[size_t(j)] = true;
    p.masked = masked.get();
    CheckAgainstTheReference(p, rng, trial);
  }
}

// Long rows take the kernels' other path (keys transposed, keys' gradients summed in blocks of
// four keys by 16 columns): causal masks with random holes and padded rows, per-row masks where
// some rows attend to a few keys and others to many, a prefix-style rectangle, head sizes and key
// counts around the block sizes.
TEST(AttentionOpsTest, LongRowsMatchTheReference) {
  std::mt19937 rng(77);
  for (int trial = 0; trial < 24; ++trial) {
    AttentionProblem p;
    p.rows = 1 + int32_t(rng() % 3);
    p.kv_heads = 1 + int32_t(rng() % 2);
    p.heads = p.kv_heads * (1 + int32_t(rng() % 2));
    p.q_len = 16 + int32_t(rng() % 60);
    p.kv_len = p.q_len + (trial % 3 == 2 ? int32_t(rng() % 20) : 0);
    const int32_t dims[] = {1, 7, 16, 17, 32, 33, 64};
    p.head_dim = dims[rng() % 7];
    p.scale = 1.0f / std::sqrt(float(p.head_dim));
    p.mask_per_row = trial % 2 == 1;
    const size_t planes = p.mask_per_row ? size_t(p.rows) : 1;
    const int32_t offset = p.kv_len - p.q_len;  // keys before the first query position
    const size_t plane = size_t(p.q_len) * size_t(p.kv_len);
    std::unique_ptr<bool[]> masked(new bool[planes * plane]);
    for (size_t pl = 0; pl < planes; ++pl) {
      // Per-row planes: the first row's keys past 5 are padding (short spans), others not.
      const int32_t pad_from = p.mask_per_row && pl == 0 ? 5 : p.kv_len;
      for (int32_t t = 0; t < p.q_len; ++t) {
        for (int32_t j = 0; j < p.kv_len; ++j) {
          bool m = j > t + offset || j >= pad_from;
          if (trial % 4 == 3) m = m || rng() % 5 == 0;  // holes inside the span
          masked[pl * plane + size_t(t) * size_t(p.kv_len) + size_t(j)] = m;
        }
      }
    }
    if (trial % 4 >= 2) {  // a query position that attends to nothing, in a long row's plane
      const size_t at = (p.mask_per_row && p.rows > 1 ? plane : 0) + size_t(p.kv_len) * 3;
      for (int32_t j = 0; j < p.kv_len; ++j) masked[at + size_t(j)] = true;
    }
    p.masked = masked.get();
    // The kernels' choice, every span on the long-row path, every span on the per-key path.
    for (int32_t min_wide_span : {16, 1, std::numeric_limits<int32_t>::max()}) {
      p.min_wide_span = min_wide_span;
      CheckAgainstTheReference(p, rng, trial);
    }
  }
}

// A NaN in one position's query makes that position's output NaN on either path (as with the
// reference and std::exp), not a quiet 0 or a probability of 1; the other positions are untouched.
TEST(AttentionOpsTest, ANaNQueryGivesThatPositionNaNOnEitherPath) {
  for (int32_t min_wide_span : {16, std::numeric_limits<int32_t>::max()}) {
    AttentionProblem p{1, 2, 1, 40, 40, 8, 0.35f, nullptr, false};
    p.min_wide_span = min_wide_span;
    std::unique_ptr<bool[]> causal(new bool[40 * 40]);
    for (int32_t t = 0; t < 40; ++t)
      for (int32_t j = 0; j < 40; ++j) causal[size_t(t * 40 + j)] = j > t;
    p.masked = causal.get();
    std::mt19937 rng(3);
    auto q = Random(rng, 2 * 40 * 8);
    const auto k = Random(rng, 40 * 8), v = Random(rng, 40 * 8);
    const int32_t t_nan = 30;  // head 0, a span of 31 keys
    q[size_t(t_nan * 8 + 2)] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> out(2 * 40 * 8), probs(2 * 40 * 40);
    AttentionForward(p, q.data(), k.data(), v.data(), out.data(), probs.data());
    for (int32_t d = 0; d < 8; ++d) {
      EXPECT_TRUE(std::isnan(out[size_t(t_nan * 8 + d)])) << "min_wide_span " << min_wide_span;
      EXPECT_TRUE(std::isfinite(out[size_t((t_nan - 1) * 8 + d)])) << min_wide_span;
      EXPECT_TRUE(std::isfinite(out[size_t((40 + t_nan) * 8 + d)])) << min_wide_span;  // head 1
    }
  }
}

TEST(AttentionOpsTest, OneKeyGivesItsValueAndEqualScoresTheMean) {
  // One row, one head, head_dim 2: a query that sees one key returns that key's value; one whose
  // keys all score the same (q = 0) returns the mean of the values it sees.
  AttentionProblem p{1, 1, 1, 2, 3, 2, 1.0f, nullptr, false};
  const bool masked[] = {false, true, true, false, false, false};
  p.masked = masked;
  const float q[] = {1, 2, 0, 0};
  const float k[] = {3, -1, 0.5f, 2, 1, 1};
  const float v[] = {1, 2, 3, 4, 5, 9};
  float out[4], probs[6];
  AttentionForward(p, q, k, v, out, probs);
  EXPECT_FLOAT_EQ(out[0], 1);
  EXPECT_FLOAT_EQ(out[1], 2);
  EXPECT_FLOAT_EQ(out[2], 3);
  EXPECT_FLOAT_EQ(out[3], 5);
  EXPECT_FLOAT_EQ(probs[3], 1.0f / 3);
}

}  // namespace
}  // namespace marlaas::kernels

#include "kernels/attention_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vector_ops.h"

namespace marlaas::kernels {
namespace {

// Offsets of row r, query head h: its query rows, its key/value head's rows, its probs and mask.
struct Head {
  int64_t q, kv, probs;
  const bool* masked;
};

__attribute__((always_inline)) inline Head HeadOf(const AttentionProblem& p, int32_t r, int32_t h) {
  const int32_t kv = h / (p.heads / p.kv_heads);
  const int64_t plane = int64_t(p.q_len) * p.kv_len;
  return {(int64_t(r) * p.heads + h) * p.q_len * p.head_dim,
          (int64_t(r) * p.kv_heads + kv) * p.kv_len * p.head_dim,
          (int64_t(r) * p.heads + h) * plane, p.masked + (p.mask_per_row ? r * plane : 0)};
}

}  // namespace

MARLAAS_CLONES void AttentionForward(const AttentionProblem& p, const float* q, const float* k,
                                     const float* v, float* out, float* probs) {
  const int32_t D = p.head_dim, S = p.kv_len;
  for (int32_t r = 0; r < p.rows; ++r) {
    for (int32_t h = 0; h < p.heads; ++h) {
      const Head at = HeadOf(p, r, h);
      for (int32_t t = 0; t < p.q_len; ++t) {
        const float* qt = q + at.q + int64_t(t) * D;
        const bool* mt = at.masked + int64_t(t) * S;
        float* pt = probs + at.probs + int64_t(t) * S;
        float* ot = out + at.q + int64_t(t) * D;
        float m = -INFINITY;
        for (int32_t j = 0; j < S; ++j) {
          pt[j] = mt[j] ? -INFINITY : p.scale * Dot(qt, k + at.kv + int64_t(j) * D, D);
          m = std::max(m, pt[j]);
        }
        std::memset(ot, 0, sizeof(float) * size_t(D));
        if (m == -INFINITY) {  // nothing to attend to
          std::memset(pt, 0, sizeof(float) * size_t(S));
          continue;
        }
        float sum = 0;
        for (int32_t j = 0; j < S; ++j) {
          pt[j] = mt[j] ? 0.0f : std::exp(pt[j] - m);
          sum += pt[j];
        }
        const float inv = 1.0f / sum;
        for (int32_t j = 0; j < S; ++j) {
          pt[j] *= inv;
          if (pt[j] != 0.0f) Axpy(pt[j], v + at.kv + int64_t(j) * D, ot, D);
        }
      }
    }
  }
}

// Per query position t, with dp[j] = d_out[t]·v[j] and c = Σ_j p[j]·dp[j]:
//   ds[j] = p[j]·(dp[j] - c),  dq[t] = scale·Σ_j ds[j]·k[j],  dk[j] += scale·ds[j]·q[t],
//   dv[j] += p[j]·d_out[t]   (dk, dv summed over the query heads sharing a key/value head).
MARLAAS_CLONES void AttentionBackward(const AttentionProblem& p, const float* q, const float* k,
                                      const float* v, const float* probs, const float* d_out,
                                      float* dq, float* dk, float* dv) {
  const int32_t D = p.head_dim, S = p.kv_len;
  const size_t kv_size = size_t(p.rows) * size_t(p.kv_heads) * size_t(S) * size_t(D);
  std::memset(dk, 0, sizeof(float) * kv_size);
  std::memset(dv, 0, sizeof(float) * kv_size);
  std::vector<float> dp(static_cast<size_t>(S));
  for (int32_t r = 0; r < p.rows; ++r) {
    for (int32_t h = 0; h < p.heads; ++h) {
      const Head at = HeadOf(p, r, h);
      for (int32_t t = 0; t < p.q_len; ++t) {
        const float* qt = q + at.q + int64_t(t) * D;
        const float* gt = d_out + at.q + int64_t(t) * D;
        const float* pt = probs + at.probs + int64_t(t) * S;
        float* dqt = dq + at.q + int64_t(t) * D;
        float c = 0;
        for (int32_t j = 0; j < S; ++j) {
          dp[size_t(j)] = pt[j] != 0.0f ? Dot(gt, v + at.kv + int64_t(j) * D, D) : 0.0f;
          c += pt[j] * dp[size_t(j)];
        }
        std::memset(dqt, 0, sizeof(float) * size_t(D));
        for (int32_t j = 0; j < S; ++j) {
          if (pt[j] == 0.0f) continue;
          const float dsj = pt[j] * (dp[size_t(j)] - c) * p.scale;
          Axpy(dsj, k + at.kv + int64_t(j) * D, dqt, D);
          Axpy(dsj, qt, dk + at.kv + int64_t(j) * D, D);
          Axpy(pt[j], gt, dv + at.kv + int64_t(j) * D, D);
        }
      }
    }
  }
}

}  // namespace marlaas::kernels

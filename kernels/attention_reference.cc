// Plain references of kernels/attention_ops.h: textbook loops, double accumulation, no skipping.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention_ops.h"

namespace marlaas::kernels::reference {
namespace {

struct Index {
  const AttentionProblem& p;
  int64_t Q(int32_t r, int32_t h, int32_t t, int32_t d) const {
    return ((int64_t(r) * p.heads + h) * p.q_len + t) * p.head_dim + d;
  }
  int64_t KV(int32_t r, int32_t h, int32_t j, int32_t d) const {  // h: the query head
    const int32_t kv = h / (p.heads / p.kv_heads);
    return ((int64_t(r) * p.kv_heads + kv) * p.kv_len + j) * p.head_dim + d;
  }
  int64_t P(int32_t r, int32_t h, int32_t t, int32_t j) const {
    return ((int64_t(r) * p.heads + h) * p.q_len + t) * p.kv_len + j;
  }
  bool Masked(int32_t r, int32_t t, int32_t j) const {
    return p
        .masked[(p.mask_per_row ? int64_t(r) * p.q_len * p.kv_len : 0) + int64_t(t) * p.kv_len + j];
  }
};

}  // namespace

void AttentionForward(const AttentionProblem& p, const float* q, const float* k, const float* v,
                      float* out, float* probs) {
  const Index ix{p};
  for (int32_t r = 0; r < p.rows; ++r) {
    for (int32_t h = 0; h < p.heads; ++h) {
      for (int32_t t = 0; t < p.q_len; ++t) {
        std::vector<double> s(size_t(p.kv_len), -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (int32_t j = 0; j < p.kv_len; ++j) {
          if (ix.Masked(r, t, j)) continue;
          double dot = 0;
          for (int32_t d = 0; d < p.head_dim; ++d)
            dot += double(q[ix.Q(r, h, t, d)]) * double(k[ix.KV(r, h, j, d)]);
          s[size_t(j)] = p.scale * dot;
          m = std::max(m, s[size_t(j)]);
        }
        double sum = 0;
        for (int32_t j = 0; j < p.kv_len; ++j)
          sum += std::isinf(m) ? 0.0 : std::exp(s[size_t(j)] - m);
        for (int32_t j = 0; j < p.kv_len; ++j)
          probs[ix.P(r, h, t, j)] = sum > 0 ? float(std::exp(s[size_t(j)] - m) / sum) : 0.0f;
        for (int32_t d = 0; d < p.head_dim; ++d) {
          double o = 0;
          for (int32_t j = 0; j < p.kv_len; ++j)
            o += double(probs[ix.P(r, h, t, j)]) * double(v[ix.KV(r, h, j, d)]);
          out[ix.Q(r, h, t, d)] = float(o);
        }
      }
    }
  }
}

void AttentionBackward(const AttentionProblem& p, const float* q, const float* k, const float* v,
                       const float* probs, const float* d_out, float* dq, float* dk, float* dv) {
  const Index ix{p};
  const int64_t kv_size = int64_t(p.rows) * p.kv_heads * p.kv_len * p.head_dim;
  std::vector<double> dk_acc(size_t(kv_size), 0.0), dv_acc(size_t(kv_size), 0.0);
  for (int32_t r = 0; r < p.rows; ++r) {
    for (int32_t h = 0; h < p.heads; ++h) {
      for (int32_t t = 0; t < p.q_len; ++t) {
        std::vector<double> dp(size_t(p.kv_len));
        double c = 0;
        for (int32_t j = 0; j < p.kv_len; ++j) {
          double dot = 0;
          for (int32_t d = 0; d < p.head_dim; ++d)
            dot += double(d_out[ix.Q(r, h, t, d)]) * double(v[ix.KV(r, h, j, d)]);
          dp[size_t(j)] = dot;
          c += double(probs[ix.P(r, h, t, j)]) * dot;
        }
        for (int32_t d = 0; d < p.head_dim; ++d) {
          double g = 0;
          for (int32_t j = 0; j < p.kv_len; ++j) {
            const double pj = probs[ix.P(r, h, t, j)];
            const double ds = pj * (dp[size_t(j)] - c) * p.scale;
            g += ds * double(k[ix.KV(r, h, j, d)]);
            dk_acc[size_t(ix.KV(r, h, j, d))] += ds * double(q[ix.Q(r, h, t, d)]);
            dv_acc[size_t(ix.KV(r, h, j, d))] += pj * double(d_out[ix.Q(r, h, t, d)]);
          }
          dq[ix.Q(r, h, t, d)] = float(g);
        }
      }
    }
  }
  for (int64_t i = 0; i < kv_size; ++i) {
    dk[i] = float(dk_acc[size_t(i)]);
    dv[i] = float(dv_acc[size_t(i)]);
  }
}

}  // namespace marlaas::kernels::reference

#include "kernels/attention_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/vector_ops.h"

// Each query position works only on the span of keys from its first to its last attended one
// (half of them under a causal mask); masked keys inside the span get probability 0. Two paths:
// - Long rows (the widest span of the row's mask plane has min_wide_span keys or more): per row
//   and key/value head, its keys (forward) or values (backward) are transposed once to
//   [head_dim, kv_len], so a position's scores against its keys are a sum of head_dim scaled key
//   columns, vectorised across keys with no horizontal sum per key (a dot product of 32 numbers
//   per key cost more in its reduction than in its products); the softmax vectorises; the keys'
//   and values' gradients are summed over the head's positions in register blocks. In the
//   forward a position of a long row whose own span is short still takes the per-key path.
// - Otherwise: one dot product per key, a scalar softmax, one axpy per key, which is faster for a
//   few keys.
// Masked keys inside a long row's span enter its sums with weight 0 (the per-key path skips
// them), as in the reference: a non-finite value or key there would spread.

namespace marlaas::kernels {
namespace {

// The keys query position t of a mask plane attends lie in [lo, hi); empty when lo == hi.
struct Span {
  int32_t lo, hi;
};

void SpansOf(const bool* plane, int32_t q_len, int32_t kv_len, Span* spans) {
  for (int32_t t = 0; t < q_len; ++t) {
    const bool* m = plane + int64_t(t) * kv_len;
    int32_t lo = 0, hi = kv_len;
    while (lo < hi && m[lo]) ++lo;
    while (hi > lo && m[hi - 1]) --hi;
    spans[t] = {lo, hi};
  }
}

// Row r's mask plane and its spans, worked out again only when the row has a plane of its own,
// and whether the row is long: its widest span has min_wide_span keys or more.
class RowSpans {
 public:
  explicit RowSpans(const AttentionProblem& p) : p_(p), spans_(static_cast<size_t>(p.q_len)) {}

  // Row r's plane; rows are visited in order from 0.
  const bool* Row(int32_t r) {
    const int64_t plane = int64_t(p_.q_len) * p_.kv_len;
    const bool* mask = p_.masked + (p_.mask_per_row ? r * plane : 0);
    if (r == 0 || p_.mask_per_row) {
      SpansOf(mask, p_.q_len, p_.kv_len, spans_.data());
      int32_t widest = 0;
      for (const Span& s : spans_) widest = std::max(widest, s.hi - s.lo);
      wide_ = widest >= p_.min_wide_span;
    }
    return mask;
  }
  bool wide() const { return wide_; }
  const Span* spans() const { return spans_.data(); }
  Span operator[](int32_t t) const { return spans_[size_t(t)]; }

 private:
  const AttentionProblem& p_;
  std::vector<Span> spans_;
  bool wide_ = false;
};

// xt[c][i] = x[i][c] for an [n, d] block.
__attribute__((always_inline)) inline void Transpose(const float* x, int32_t n, int32_t d,
                                                     float* xt) {
  for (int32_t i = 0; i < n; ++i) {
    for (int32_t c = 0; c < d; ++c) xt[int64_t(c) * n + i] = x[int64_t(i) * d + c];
  }
}

// s[j] = Σ_c a[c]·bt[c][j] for j in [lo, hi), bt being [d, ld]; the terms are added in order of
// c, four columns per pass over s.
__attribute__((always_inline)) inline void RowTimesColumns(const float* __restrict a,
                                                           const float* __restrict bt, int32_t d,
                                                           int32_t ld, int32_t lo, int32_t hi,
                                                           float* __restrict s) {
  for (int32_t j = lo; j < hi; ++j) s[j] = 0.0f;
  int32_t c = 0;
  for (; c + 4 <= d; c += 4) {
    const float a0 = a[c], a1 = a[c + 1], a2 = a[c + 2], a3 = a[c + 3];
    const float* __restrict b0 = bt + int64_t(c) * ld;
    const float* __restrict b1 = b0 + ld;
    const float* __restrict b2 = b1 + ld;
    const float* __restrict b3 = b2 + ld;
    for (int32_t j = lo; j < hi; ++j) {
      float acc = s[j];
      acc += a0 * b0[j];
      acc += a1 * b1[j];
      acc += a2 * b2[j];
      acc += a3 * b3[j];
      s[j] = acc;
    }
  }
  for (; c < d; ++c) {
    const float ac = a[c];
    const float* __restrict bc = bt + int64_t(c) * ld;
    for (int32_t j = lo; j < hi; ++j) s[j] += ac * bc[j];
  }
}

// y[c] += Σ_j w[j]·x[j][c] for j in [lo, hi), x being [*, d] rows; the terms are added in order
// of j (as that many Axpy calls would), four rows per pass over y.
__attribute__((always_inline)) inline void WeightedRowSum(const float* __restrict w,
                                                          const float* __restrict x, int32_t d,
                                                          int32_t lo, int32_t hi,
                                                          float* __restrict y) {
  int32_t j = lo;
  for (; j + 4 <= hi; j += 4) {
    const float w0 = w[j], w1 = w[j + 1], w2 = w[j + 2], w3 = w[j + 3];
    const float* __restrict x0 = x + int64_t(j) * d;
    const float* __restrict x1 = x0 + d;
    const float* __restrict x2 = x1 + d;
    const float* __restrict x3 = x2 + d;
    for (int32_t c = 0; c < d; ++c) {
      float acc = y[c];
      acc += w0 * x0[c];
      acc += w1 * x1[c];
      acc += w2 * x2[c];
      acc += w3 * x3[c];
      y[c] = acc;
    }
  }
  for (; j < hi; ++j) Axpy(w[j], x + int64_t(j) * d, y, d);
}

// Eight floats as one value (GCC's vector extension: one register with AVX, two without). Only
// inside always-inlined helpers, so how the baseline ABI would pass one does not matter.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Float8 __attribute__((vector_size(32)));

__attribute__((always_inline)) inline Float8 Load8(const float* x) {
  Float8 v;
  std::memcpy(&v, x, sizeof(v));
  return v;
}

__attribute__((always_inline)) inline void Store8(float* x, const Float8& v) {
  std::memcpy(x, &v, sizeof(v));
}

// c[j] += Σ_t a[t][j]·b[t] for every key j, a being [q_len, kv_len] (0 outside each position's
// span) and b, c rows of d: the keys' gradient from all query positions. The terms are added in
// order of t, as q_len passes of Axpy would, but four keys by 16 columns of c are kept in registers
// across the positions, and a position is passed over for keys outside its span.
__attribute__((always_inline)) inline void AddTransposedProduct(const float* __restrict a,
                                                                const float* __restrict b,
                                                                const Span* spans, int32_t q_len,
                                                                int32_t kv_len, int32_t d,
                                                                float* __restrict c) {
  int32_t j0 = 0, col_end = d - d % 16;
  for (; j0 + 4 <= kv_len; j0 += 4) {
    float* c0 = c + int64_t(j0) * d;
    float* c1 = c0 + d;
    float* c2 = c1 + d;
    float* c3 = c2 + d;
    for (int32_t col = 0; col < col_end; col += 16) {
      Float8 x00 = Load8(c0 + col), x01 = Load8(c0 + col + 8), x10 = Load8(c1 + col),
             x11 = Load8(c1 + col + 8), x20 = Load8(c2 + col), x21 = Load8(c2 + col + 8),
             x30 = Load8(c3 + col), x31 = Load8(c3 + col + 8);
      for (int32_t t = 0; t < q_len; ++t) {
        const Span span = spans[t];
        if (span.lo >= span.hi || span.lo >= j0 + 4 || span.hi <= j0) continue;
        const float* at = a + int64_t(t) * kv_len + j0;
        const Float8 b0 = Load8(b + int64_t(t) * d + col), b1 = Load8(b + int64_t(t) * d + col + 8);
        x00 += at[0] * b0;
        x01 += at[0] * b1;
        x10 += at[1] * b0;
        x11 += at[1] * b1;
        x20 += at[2] * b0;
        x21 += at[2] * b1;
        x30 += at[3] * b0;
        x31 += at[3] * b1;
      }
      Store8(c0 + col, x00);
      Store8(c0 + col + 8, x01);
      Store8(c1 + col, x10);
      Store8(c1 + col + 8, x11);
      Store8(c2 + col, x20);
      Store8(c2 + col + 8, x21);
      Store8(c3 + col, x30);
      Store8(c3 + col + 8, x31);
    }
  }
  // The columns past the last 16 of the keys above, and the last keys: one key at a time.
  for (int32_t j = 0; j < kv_len; ++j) {
    const int32_t from = j < j0 ? col_end : 0;
    if (from == d) continue;
    for (int32_t t = 0; t < q_len; ++t) {
      if (spans[t].lo > j || spans[t].hi <= j) continue;
      const float w = a[int64_t(t) * kv_len + j];
      for (int32_t l = from; l < d; ++l) c[int64_t(j) * d + l] += w * b[int64_t(t) * d + l];
    }
  }
}

#pragma GCC diagnostic pop

// s[j] = a·x[j] for j in [lo, hi), from the rows x [*, d] or, for a span of at least `wide`
// keys, their transpose xt [d, ld] (null when it was not made): a pass over the transposed keys
// costs more to set up than it saves on a few keys.
__attribute__((always_inline)) inline void RowTimesRows(const float* a, const float* x,
                                                        const float* xt, int32_t d, int32_t ld,
                                                        int32_t lo, int32_t hi, int32_t wide,
                                                        float* s) {
  if (xt != nullptr && hi - lo >= wide) {
    RowTimesColumns(a, xt, d, ld, lo, hi, s);
  } else {
    for (int32_t j = lo; j < hi; ++j) s[j] = Dot(a, x + int64_t(j) * d, d);
  }
}

}  // namespace

MARLAAS_CLONES void AttentionForward(const AttentionProblem& p, const float* q, const float* k,
                                     const float* v, float* out, float* probs) {
  const int32_t D = p.head_dim, S = p.kv_len, T = p.q_len, group = p.heads / p.kv_heads;
  const float scale = p.scale;
  const int64_t plane = int64_t(T) * S;
  RowSpans spans(p);
  std::vector<float> kt;  // the keys transposed, once a row is long
  for (int32_t r = 0; r < p.rows; ++r) {
    const bool* mask = spans.Row(r);
    const bool wide = spans.wide();
    if (wide) kt.resize(size_t(D) * size_t(S));
    for (int32_t kv = 0; kv < p.kv_heads; ++kv) {
      const int64_t kv_at = (int64_t(r) * p.kv_heads + kv) * S * D;
      if (wide) Transpose(k + kv_at, S, D, kt.data());
      for (int32_t h = kv * group; h < (kv + 1) * group; ++h) {
        const int64_t head = int64_t(r) * p.heads + h;
        for (int32_t t = 0; t < T; ++t) {
          const auto [lo, hi] = spans[t];
          // The mask's bytes read as bytes (bool is 0 or 1): GCC has no vector type for bool.
          const uint8_t* mt = reinterpret_cast<const uint8_t*>(mask) + int64_t(t) * S;
          float* __restrict pt = probs + head * plane + int64_t(t) * S;
          float* ot = out + (head * T + t) * D;
          std::memset(ot, 0, sizeof(float) * size_t(D));
          std::memset(pt, 0, sizeof(float) * size_t(lo));
          std::memset(pt + hi, 0, sizeof(float) * size_t(S - hi));
          if (lo == hi) continue;  // nothing to attend to: p = 0, out = 0
          const float* qt = q + (head * T + t) * D;
          if (hi - lo < p.min_wide_span) {
            // A few keys: one dot product each, a scalar softmax, one scaled value each.
            float m = -INFINITY;
            for (int32_t j = lo; j < hi; ++j) {
              pt[j] = mt[j] ? -INFINITY : scale * Dot(qt, k + kv_at + int64_t(j) * D, D);
              m = std::max(m, pt[j]);
            }
            float sum = 0;
            for (int32_t j = lo; j < hi; ++j) {
              pt[j] = mt[j] ? 0.0f : std::exp(pt[j] - m);
              sum += pt[j];
            }
            const float inv = 1.0f / sum;
            for (int32_t j = lo; j < hi; ++j) {
              pt[j] *= inv;
              if (pt[j] != 0.0f) Axpy(pt[j], v + kv_at + int64_t(j) * D, ot, D);
            }
            continue;
          }
          RowTimesColumns(qt, kt.data(), D, S, lo, hi, pt);
          // Selects between constants, then arithmetic: GCC vectorises these loops (not a select
          // between a constant and a computed value).
          for (int32_t j = lo; j < hi; ++j) pt[j] = scale * pt[j] + (mt[j] ? -INFINITY : 0.0f);
          const float m = Max(pt + lo, hi - lo);  // finite: keys lo and hi - 1 are attended
          for (int32_t j = lo; j < hi; ++j) pt[j] = Exp(pt[j] - m) * (mt[j] ? 0.0f : 1.0f);
          const float inv = 1.0f / Sum(pt + lo, hi - lo);
          for (int32_t j = lo; j < hi; ++j) pt[j] *= inv;
          WeightedRowSum(pt, v + kv_at, D, lo, hi, ot);
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
  const int32_t D = p.head_dim, S = p.kv_len, T = p.q_len, group = p.heads / p.kv_heads;
  const int64_t plane = int64_t(T) * S;
  const size_t kv_size = size_t(p.rows) * size_t(p.kv_heads) * size_t(S) * size_t(D);
  std::memset(dk, 0, sizeof(float) * kv_size);
  std::memset(dv, 0, sizeof(float) * kv_size);
  RowSpans spans(p);
  std::vector<float> vt;                          // the values transposed, once a row is long
  std::vector<float> ds(static_cast<size_t>(S));  // a row of ds; a head's ds once a row is long
  for (int32_t r = 0; r < p.rows; ++r) {
    spans.Row(r);
    const bool wide = spans.wide();
    if (wide) {
      vt.resize(size_t(D) * size_t(S));
      ds.resize(size_t(T) * size_t(S));
    }
    for (int32_t kv = 0; kv < p.kv_heads; ++kv) {
      const int64_t kv_at = (int64_t(r) * p.kv_heads + kv) * S * D;
      if (wide) Transpose(v + kv_at, S, D, vt.data());
      for (int32_t h = kv * group; h < (kv + 1) * group; ++h) {
        const int64_t head = int64_t(r) * p.heads + h;
        for (int32_t t = 0; t < T; ++t) {
          const auto [lo, hi] = spans[t];
          const float* qt = q + (head * T + t) * D;
          const float* gt = d_out + (head * T + t) * D;
          const float* pt = probs + head * plane + int64_t(t) * S;
          float* dqt = dq + (head * T + t) * D;
          std::memset(dqt, 0, sizeof(float) * size_t(D));
          if (lo == hi) continue;
          if (!wide) {
            // A few keys: one dot product each, their gradients added at once.
            float* dp = ds.data();
            float c = 0;
            for (int32_t j = lo; j < hi; ++j) {
              dp[j] = pt[j] != 0.0f ? Dot(gt, v + kv_at + int64_t(j) * D, D) : 0.0f;
              c += pt[j] * dp[j];
            }
            for (int32_t j = lo; j < hi; ++j) {
              if (pt[j] == 0.0f) continue;  // masked (or vanishing): no gradient to its key
              const float dsj = pt[j] * (dp[j] - c) * p.scale;
              Axpy(dsj, k + kv_at + int64_t(j) * D, dqt, D);
              Axpy(dsj, qt, dk + kv_at + int64_t(j) * D, D);
              Axpy(pt[j], gt, dv + kv_at + int64_t(j) * D, D);
            }
            continue;
          }
          // Wide spans: dp, then ds in its place, a row of the head's ds; the keys' gradients
          // are summed after the head's last position.
          float* dst = ds.data() + int64_t(t) * S;
          RowTimesRows(gt, v + kv_at, vt.data(), D, S, lo, hi, p.min_wide_span, dst);
          const float c = Dot(pt + lo, dst + lo, hi - lo);
          for (int32_t j = lo; j < hi; ++j) dst[j] = pt[j] * (dst[j] - c) * p.scale;
          WeightedRowSum(dst, k + kv_at, D, lo, hi, dqt);
          std::memset(dst, 0, sizeof(float) * size_t(lo));
          std::memset(dst + hi, 0, sizeof(float) * size_t(S - hi));
        }
        if (wide) {
          AddTransposedProduct(ds.data(), q + head * T * D, spans.spans(), T, S, D, dk + kv_at);
          AddTransposedProduct(probs + head * plane, d_out + head * T * D, spans.spans(), T, S, D,
                               dv + kv_at);
        }
      }
    }
  }
}

}  // namespace marlaas::kernels

// Masked grouped-query attention on the CPU, forward and backward, for the short rows of
// training and evaluation (LibTorch 1.13's CPU bmm runs one small matrix product per row and
// head: with rows of 8 tokens, 512 of them per product, the attention's backward took ~30% of a
// trainer step). Per row r, query head h and its key/value head kv = h / (heads / kv_heads):
//   s[t, j] = scale · q[r, h, t]·k[r, kv, j]  (-inf where masked[r, t, j]),
//   p = softmax_j(s),  out[r, h, t] = Σ_j p[t, j] · v[r, kv, j].
// A query position whose every key is masked gets p = 0 and out = 0. Row-major f32, contiguous:
// q, out, dq [rows, heads, q_len, head_dim]; k, v, dk, dv [rows, kv_heads, kv_len, head_dim];
// probs [rows, heads, q_len, kv_len]; masked [rows or 1, q_len, kv_len] (one byte each, true =
// not attended). Inputs are assumed valid (heads a multiple of kv_heads); pure; single-threaded.
// The plain references are in kernels::reference (attention_reference.cc).
#pragma once

#include <cstdint>

namespace marlaas::kernels {

struct AttentionProblem {
  int32_t rows = 0, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0;
  float scale = 1.0f;
  const bool* masked = nullptr;
  bool mask_per_row = false;  // masked has `rows` planes (else one for every row)
  // A row (its mask plane) whose widest span of attended keys (first to last) has at least this
  // many keys takes the long-row path: its keys (values) transposed once, each position's scores
  // vectorised across the keys, the keys' gradients summed in register blocks. Others take one
  // dot product per key, faster for a few keys. bench_attention sets it past kv_len to time the
  // per-key path alone; the results agree to rounding.
  int32_t min_wide_span = 16;
};

// out and probs (kept for the backward) are written.
void AttentionForward(const AttentionProblem& p, const float* q, const float* k, const float* v,
                      float* out, float* probs);
// dq, dk and dv are written (not accumulated) from d_out, the forward's inputs and its probs.
void AttentionBackward(const AttentionProblem& p, const float* q, const float* k, const float* v,
                       const float* probs, const float* d_out, float* dq, float* dk, float* dv);

namespace reference {
void AttentionForward(const AttentionProblem& p, const float* q, const float* k, const float* v,
                      float* out, float* probs);
void AttentionBackward(const AttentionProblem& p, const float* q, const float* k, const float* v,
                       const float* probs, const float* d_out, float* dq, float* dk, float* dv);
}  // namespace reference

}  // namespace marlaas::kernels

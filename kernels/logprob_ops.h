// Fused log-softmax + gather: the log-probability of one chosen token per row,
//   logprob[i] = z[i, t_i] - logsumexp_v z[i, v],   z = logits * inv_temperature,
// in two reads of each row (its max, then the sum of exponentials), never materialising a second
// vocabulary-sized tensor. The backward writes d logits, which training needs anyway:
//   dlogits[i, v] = g_i * inv_temperature * (1[v == t_i] - exp(z[i, v] - lse_i)).
// This is the distribution the rollout samples from (temperature-scaled, before top-k/top-p
// truncation), so rollout behaviour log-probs and trainer log-probs are the same function.
// The CPU kernel's exponential is kernels::Exp (vectorised, within 2 ulp), so a token more than
// 86.6 below the row's log-sum-exp (a -inf logit included) gets a gradient of at most
// |g_i|·inv_temperature·2.5e-38 instead of a smaller one or 0. A NaN logit, or +inf, makes its
// row's results NaN. Inputs are assumed valid (0 <= t_i < vocab); pure; thread-safe on disjoint
// outputs.
#pragma once

#include <cstdint>

namespace marlaas::kernels {

struct LogprobProblem {
  int32_t rows = 0;
  int32_t vocab = 0;
  int64_t stride = 0;  // elements between rows of logits (and of dlogits)
  float inv_temperature = 1.0f;
};

// logprob[i] and, if lse != nullptr, lse[i] = logsumexp_v z[i, v] (kept for the backward).
void TokenLogprobs(const LogprobProblem& p, const float* logits, const int32_t* targets,
                   float* logprob, float* lse);
// dlogits = grad_logprob ⊙ ∂logprob/∂logits (overwrites dlogits).
void TokenLogprobsBackward(const LogprobProblem& p, const float* logits, const int32_t* targets,
                           const float* lse, const float* grad_logprob, float* dlogits);

namespace reference {
void TokenLogprobs(const LogprobProblem& p, const float* logits, const int32_t* targets,
                   float* logprob, float* lse);
void TokenLogprobsBackward(const LogprobProblem& p, const float* logits, const int32_t* targets,
                           const float* lse, const float* grad_logprob, float* dlogits);
}  // namespace reference

}  // namespace marlaas::kernels

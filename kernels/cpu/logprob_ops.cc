#include "kernels/logprob_ops.h"

#include <cmath>

#include "kernels/cpu/vector_ops.h"

namespace marlaas::kernels {

MARLAAS_CLONES void TokenLogprobs(const LogprobProblem& p, const float* logits,
                                  const int32_t* targets, float* logprob, float* lse) {
  for (int32_t i = 0; i < p.rows; ++i) {
    const float* row = logits + int64_t(i) * p.stride;
    // Pass 1: the max (NaNs passed over); pass 2: the sum of exponentials, in double lanes. Both
    // vectorise (lane accumulators, Exp instead of a libm call per element) and read the row
    // from cache; nothing vocabulary-sized is written. A NaN logit, or +inf, makes the row's
    // results NaN.
    const float mz = Max(row, p.vocab) * p.inv_temperature;
    const float l = mz + float(std::log(SumExp(row, p.vocab, p.inv_temperature, mz)));
    logprob[i] = row[targets[i]] * p.inv_temperature - l;
    if (lse != nullptr) lse[i] = l;
  }
}

MARLAAS_CLONES void TokenLogprobsBackward(const LogprobProblem& p, const float* logits,
                                          const int32_t* targets, const float* lse,
                                          const float* grad_logprob, float* dlogits) {
  for (int32_t i = 0; i < p.rows; ++i) {
    const float* row = logits + int64_t(i) * p.stride;
    float* d = dlogits + int64_t(i) * p.stride;
    const float inv_t = p.inv_temperature;  // a local: d[] could alias p's fields
    const float g = grad_logprob[i] * inv_t;
    const float l = lse[i];
    // Vectorises. A token Exp's floor covers (z - lse < -86.6, -inf included) gets a gradient of
    // at most |g|·2.5e-38 where the exact one is below that or 0.
    for (int32_t v = 0; v < p.vocab; ++v) d[v] = -g * Exp(row[v] * inv_t - l);
    d[targets[i]] += g;
  }
}

}  // namespace marlaas::kernels

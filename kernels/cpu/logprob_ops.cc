#include "kernels/logprob_ops.h"

#include <cmath>

#include "kernels/cpu/vector_ops.h"

namespace marlaas::kernels {

MARLAAS_CLONES void TokenLogprobs(const LogprobProblem& p, const float* logits,
                                  const int32_t* targets, float* logprob, float* lse) {
  for (int32_t i = 0; i < p.rows; ++i) {
    const float* row = logits + int64_t(i) * p.stride;
    // Pass 1: the max (vectorises); pass 2: the sum of exponentials. Both read the row from
    // cache; nothing vocabulary-sized is written.
    float m = -INFINITY;
    for (int32_t v = 0; v < p.vocab; ++v) m = std::fmax(m, row[v]);
    const float mz = m * p.inv_temperature;
    float s = 0;
    for (int32_t v = 0; v < p.vocab; ++v) s += std::exp(row[v] * p.inv_temperature - mz);
    const float l = mz + std::log(s);
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
    const float g = grad_logprob[i] * p.inv_temperature;
    const float l = lse[i];
    for (int32_t v = 0; v < p.vocab; ++v) d[v] = -g * std::exp(row[v] * p.inv_temperature - l);
    d[targets[i]] += g;
  }
}

}  // namespace marlaas::kernels

#include <cmath>

#include "kernels/logprob_ops.h"

namespace marlaas::kernels {

namespace reference {

void TokenLogprobs(const LogprobProblem& p, const float* logits, const int32_t* targets,
                   float* logprob, float* lse) {
  for (int32_t i = 0; i < p.rows; ++i) {
    const float* row = logits + int64_t(i) * p.stride;
    double m = -INFINITY;
    for (int32_t v = 0; v < p.vocab; ++v) m = std::fmax(m, double(row[v]) * p.inv_temperature);
    double s = 0;
    for (int32_t v = 0; v < p.vocab; ++v) s += std::exp(double(row[v]) * p.inv_temperature - m);
    const double l = m + std::log(s);
    logprob[i] = float(double(row[targets[i]]) * p.inv_temperature - l);
    if (lse != nullptr) lse[i] = float(l);
  }
}

void TokenLogprobsBackward(const LogprobProblem& p, const float* logits, const int32_t* targets,
                           const float* lse, const float* grad_logprob, float* dlogits) {
  for (int32_t i = 0; i < p.rows; ++i) {
    const float* row = logits + int64_t(i) * p.stride;
    for (int32_t v = 0; v < p.vocab; ++v) {
      const double softmax = std::exp(double(row[v]) * p.inv_temperature - double(lse[i]));
      const double onehot = v == targets[i] ? 1.0 : 0.0;
      dlogits[int64_t(i) * p.stride + v] =
          float(double(grad_logprob[i]) * p.inv_temperature * (onehot - softmax));
    }
  }
}

}  // namespace reference
}  // namespace marlaas::kernels

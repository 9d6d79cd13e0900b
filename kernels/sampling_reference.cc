#include <cmath>

#include "kernels/sampling_ops.h"

namespace marlaas::kernels::reference {

SamplingWeights ComputeSamplingWeights(const float* logits, int32_t n, float inv_temperature,
                                       float* w) {
  float m = -INFINITY;
  int32_t argmax = 0;
  for (int32_t v = 0; v < n; ++v) {
    if (logits[v] > m) {
      m = logits[v];
      argmax = v;
    }
  }
  double sum = 0;
  for (int32_t v = 0; v < n; ++v) {
    const double z = (double(logits[v]) - m) * inv_temperature;
    w[v] = z < -86.6 ? 0.0f : float(std::exp(z));
    sum += w[v];
  }
  return {m, argmax, sum};
}

}  // namespace marlaas::kernels::reference

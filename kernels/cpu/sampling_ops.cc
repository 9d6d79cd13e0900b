#include "kernels/sampling_ops.h"

#include <cmath>

#include "kernels/cpu/vector_ops.h"

namespace marlaas::kernels {

MARLAAS_CLONES SamplingWeights ComputeSamplingWeights(const float* logits, int32_t n,
                                                      float inv_temperature, float* w) {
  const float m = Max(logits, n);
  int32_t argmax = 0;  // the first of the maxima; 0 when no logit is above -inf
  if (m > -INFINITY) {
    while (!(logits[argmax] == m)) ++argmax;
  }
  // (x − max)·inv, not x·inv − max·inv, which FMA contraction would leave non-zero for the
  // maximum itself: its weight is exactly 1. Exp covers down to -86.6 and no further; the select
  // (between a constant and a computed value) vectorises with -fno-trapping-math.
  for (int32_t v = 0; v < n; ++v) {
    const float z = (logits[v] - m) * inv_temperature;
    w[v] = z < -86.6f ? 0.0f : Exp(z);
  }
  const double sum = SumAsDouble(w, n);
  return {m, argmax, sum};
}

}  // namespace marlaas::kernels

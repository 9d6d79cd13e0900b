#include "kernels/sampling_ops.h"

#include <algorithm>
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
  double sum = 0;
  for (int32_t b = 0; b < n; b += 4096) {
    const int32_t e = std::min(n, b + 4096);
    // (x − max)·inv, not x·inv − max·inv, which FMA contraction would leave non-zero for the
    // maximum itself: its weight is exactly 1. The select (between a constant and a computed
    // value) vectorises with -fno-trapping-math.
    for (int32_t v = b; v < e; ++v) {
      const float z = (logits[v] - m) * inv_temperature;
      w[v] = z < -87.0f ? 0.0f : Exp(z);
    }
    sum += Sum(w + b, e - b);
  }
  return {m, argmax, sum};
}

}  // namespace marlaas::kernels

// The weights a sampler draws one token from, for one row of logits:
//   max = max_v x[v] (NaNs passed over; -inf when there is no number),
//   argmax = the first v with x[v] == max (0 when no logit is above -inf),
//   w[v] = e^((x[v] − max)·inv_temperature), 0 where that exponent is below −87 (a -inf logit
//          included: such a token is never drawn); NaN for a NaN logit, for a +inf one, and for
//          every token when no logit is above -inf,
//   sum = Σ w[v], added in double.
// The most probable token's weight is exactly 1. The CPU kernel vectorises the max and the
// exponentials (kernels::Exp, within 2 ulp) and sums blocks of 4096 weights in float lanes and the
// blocks in double, so `sum` is within 1e-6 relative of an exact sum of w. Pure; thread-safe on
// disjoint outputs. The reference computes the same in double with libm's exp.
#pragma once

#include <cstdint>

namespace marlaas::kernels {

struct SamplingWeights {
  float max;
  int32_t argmax;
  double sum;
};

// w: n floats. n >= 1.
SamplingWeights ComputeSamplingWeights(const float* logits, int32_t n, float inv_temperature,
                                       float* w);

namespace reference {
SamplingWeights ComputeSamplingWeights(const float* logits, int32_t n, float inv_temperature,
                                       float* w);
}  // namespace reference

}  // namespace marlaas::kernels

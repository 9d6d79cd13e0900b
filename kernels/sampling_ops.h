// The weights a sampler draws one token from, for one row of logits:
//   max = max_v x[v] (NaNs passed over; -inf when there is no number),
//   argmax = the first v with x[v] == max (0 when no logit is above -inf),
//   w[v] = e^((x[v] − max)·inv_temperature), 0 where that exponent is below −86.6 (a -inf logit
//          included: model/sampler.h never draws a token of weight 0); NaN for a NaN logit, for
//          a +inf one, and for every token when no logit is above -inf or inv_temperature is
//          not finite,
//   sum = Σ w[v], added in double.
// The most probable token's weight is then exactly 1. The CPU kernel vectorises the max and the
// exponentials (kernels::Exp, within 2 ulp over the range it covers) and adds the weights in 16
// double lanes, so `sum` is within about n·1e-16 relative of the exact sum of the float weights.
// Pure; thread-safe on disjoint outputs. The reference computes the same in double with libm's
// exp (each weight rounded to float) and a sequential sum.
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

// Warp and block reductions for the kernels (f32 sums, and the (max, sum of exp) pair of an
// online log-sum-exp). Included only by .cu files. A block reduction needs blockDim.x to be a
// multiple of 32 and at most 1024, and every thread of the block to call it.
#pragma once

#include <cmath>

namespace marlaas::kernels::cuda {

__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// exp-sum `s` relative to max `m`; (-inf, 0) is the empty pair.
struct LseAccum {
  float m;
  float s;
};

__device__ __forceinline__ LseAccum LseCombine(LseAccum a, LseAccum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ LseAccum LseAdd(LseAccum a, float x) {
  if (x == -INFINITY) return a;  // exp(-inf) adds nothing
  if (x <= a.m) return {a.m, a.s + expf(x - a.m)};
  return {x, a.s * expf(a.m - x) + 1.0f};  // a.m == -inf gives 0 * 0 + 1
}

__device__ __forceinline__ LseAccum WarpLse(LseAccum v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const LseAccum o{__shfl_xor_sync(0xffffffffu, v.m, offset),
                     __shfl_xor_sync(0xffffffffu, v.s, offset)};
    v = LseCombine(v, o);
  }
  return v;
}

// The block's combined pair, returned to every thread.
__device__ __forceinline__ LseAccum BlockLse(LseAccum v) {
  __shared__ float ms[32], ss[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpLse(v);
  if (lane == 0) {
    ms[warp] = v.m;
    ss[warp] = v.s;
  }
  __syncthreads();
  LseAccum all{-INFINITY, 0.0f};
  for (int w = 0; w < warps; ++w) all = LseCombine(all, LseAccum{ms[w], ss[w]});
  __syncthreads();  // ms/ss may be reused by a later call
  return all;
}

}  // namespace marlaas::kernels::cuda

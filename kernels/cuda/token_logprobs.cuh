// Fused log-softmax + gather kernels (launcher: token_logprobs.cu, API: logprob_cuda.h). One
// block per row: each thread folds its strided share of the row into an online (max, sum of
// exp) pair, the block combines the pairs, and thread 0 gathers the target. The backward
// recomputes exp(z - lse) per element, which keeps it one read of the logits and one write.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/reduce.cuh"

namespace marlaas::kernels::cuda {

inline constexpr int kLogprobThreads = 512;

// grid (rows), block kLogprobThreads.
template <typename T>
__global__ void __launch_bounds__(kLogprobThreads)
    TokenLogprobsKernel(const T* __restrict__ logits, int64_t stride, int32_t vocab,
                        float inv_temperature, const int32_t* __restrict__ targets,
                        float* __restrict__ logprob, float* __restrict__ lse) {
  const int32_t row = blockIdx.x;
  const T* z = logits + row * stride;
  LseAccum acc{-INFINITY, 0.0f};
  for (int32_t v = threadIdx.x; v < vocab; v += blockDim.x)
    acc = LseAdd(acc, ToFloat(z[v]) * inv_temperature);
  acc = BlockLse(acc);
  if (threadIdx.x == 0) {
    const float l = acc.m + logf(acc.s);
    const int32_t t = targets[row];
    logprob[row] = t >= 0 && t < vocab ? ToFloat(z[t]) * inv_temperature - l : NAN;
    if (lse != nullptr) lse[row] = l;
  }
}

// grid (rows, ceil(vocab / (kLogprobThreads * 4))), block kLogprobThreads.
template <typename T>
__global__ void __launch_bounds__(kLogprobThreads)
    TokenLogprobsBackwardKernel(const T* __restrict__ logits, int64_t stride, int64_t dstride,
                                int32_t vocab, float inv_temperature,
                                const int32_t* __restrict__ targets, const float* __restrict__ lse,
                                const float* __restrict__ grad, T* __restrict__ dlogits) {
  const int32_t row = blockIdx.x;
  const T* z = logits + row * stride;
  T* dz = dlogits + row * dstride;
  const float g = grad[row] * inv_temperature, l = lse[row];
  const int32_t t = targets[row];
  const int32_t per_block = blockDim.x * 4;
  const int32_t v_end = min(vocab, int32_t(blockIdx.y + 1) * per_block);
  for (int32_t v = blockIdx.y * per_block + threadIdx.x; v < v_end; v += blockDim.x) {
    const float softmax = expf(ToFloat(z[v]) * inv_temperature - l);
    dz[v] = FromFloat<T>(g * ((v == t ? 1.0f : 0.0f) - softmax));
  }
}

}  // namespace marlaas::kernels::cuda

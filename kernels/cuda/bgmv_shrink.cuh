// BGMV shrink kernel (launcher: bgmv_shrink.cu, API: lora_cuda.h): y[i, r] = x[i] · A[k_i, r],
// one block per row, one warp per rank (strided over the block's ranks), f32 accumulation and a
// warp reduction. Assumes what the launcher checked; rows whose adapter index is out of range are
// not written.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/reduce.cuh"

namespace marlaas::kernels::cuda {

inline constexpr int kBgmvShrinkThreads = 256;  // 8 warps
inline constexpr int kBgmvShrinkRanksPerBlock = 8;

// grid (rows, ceil(rank / kBgmvShrinkRanksPerBlock)), block kBgmvShrinkThreads.
template <typename T>
__global__ void __launch_bounds__(kBgmvShrinkThreads)
    BgmvShrinkKernel(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ a,
                     int32_t num_adapters, int32_t rank, int32_t in_dim,
                     const int32_t* __restrict__ row_adapter, float* __restrict__ y,
                     int64_t y_stride) {
  const int32_t row = blockIdx.x;
  const int32_t k = row_adapter[row];
  if (k < 0 || k >= num_adapters) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t r = blockIdx.y * kBgmvShrinkRanksPerBlock + warp;
  if (r >= rank) return;
  const T* xi = x + row * x_stride;
  const T* ar = a + (int64_t(k) * rank + r) * in_dim;
  float acc = 0.0f;
  for (int32_t j = lane; j < in_dim; j += 32) acc += ToFloat(xi[j]) * ToFloat(ar[j]);
  acc = WarpSum(acc);
  if (lane == 0) y[row * y_stride + r] = acc;
}

}  // namespace marlaas::kernels::cuda

// BGMV expand kernel (launcher: bgmv_expand.cu, API: lora_cuda.h):
// out[i, o] += scale[k_i] · Σ_r y[i, r] · Bᵀ[k_i, r, o]. One block per batch row and column tile;
// each thread owns one output column, so the loads of Bᵀ (rank rows of out_dim) are coalesced.
// Assumes what the launcher checked; rows whose adapter index is out of range are not touched.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/lora_cuda.h"

namespace marlaas::kernels::cuda {

inline constexpr int kBgmvExpandThreads = 256;

// grid (rows, ceil(out_dim / kBgmvExpandThreads)), block kBgmvExpandThreads.
template <typename T>
__global__ void __launch_bounds__(kBgmvExpandThreads)
    BgmvExpandKernel(const float* __restrict__ y, int64_t y_stride, const T* __restrict__ bt,
                     const float* __restrict__ scale, int32_t num_adapters, int32_t rank,
                     int32_t out_dim, const int32_t* __restrict__ row_adapter, T* __restrict__ out,
                     int64_t out_stride) {
  const int32_t row = blockIdx.x;
  const int32_t k = row_adapter[row];
  if (k < 0 || k >= num_adapters) return;  // the whole block leaves together
  __shared__ float ys[kMaxCudaLoraRank];
  for (int r = threadIdx.x; r < rank; r += blockDim.x) ys[r] = y[row * y_stride + r] * scale[k];
  __syncthreads();
  const int32_t o = blockIdx.y * blockDim.x + threadIdx.x;
  if (o >= out_dim) return;
  const T* b = bt + int64_t(k) * rank * out_dim + o;
  float acc = 0.0f;
  for (int32_t r = 0; r < rank; ++r) acc += ys[r] * ToFloat(b[int64_t(r) * out_dim]);
  T* po = out + row * out_stride + o;
  *po = FromFloat<T>(ToFloat(*po) + acc);
}

}  // namespace marlaas::kernels::cuda

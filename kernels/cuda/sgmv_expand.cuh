// SGMV expand kernel (launcher: sgmv_expand.cu, API: lora_cuda.h): for each segment s of rows
// sharing adapter k = seg_adapter[s], out[i, o] += scale[k] · Σ_r y[i, r] · Bᵀ[k, r, o]. A block
// takes a tile of up to kSgmvRows rows of one segment and a tile of output columns; each thread
// owns one column and keeps the tile's kSgmvRows sums in registers, so each element of Bᵀ is
// loaded once per row tile (coalesced along the columns). Assumes what the launcher checked;
// segments whose adapter index is out of range are not touched.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/lora_cuda.h"
#include "kernels/cuda/sgmv_shrink.cuh"  // kSgmvRows

namespace marlaas::kernels::cuda {

inline constexpr int kSgmvExpandThreads = 256;

// grid (ceil(out_dim / kSgmvExpandThreads), ceil(rows / kSgmvRows), num_segments), block
// kSgmvExpandThreads. Tiles that start past the end of their segment return at once.
template <typename T>
__global__ void __launch_bounds__(kSgmvExpandThreads)
    SgmvExpandKernel(const float* __restrict__ y, int64_t y_stride, const T* __restrict__ bt,
                     const float* __restrict__ scale, int32_t num_adapters, int32_t rank,
                     int32_t out_dim, const int32_t* __restrict__ seg_start,
                     const int32_t* __restrict__ seg_adapter, T* __restrict__ out,
                     int64_t out_stride) {
  const int32_t seg = blockIdx.z;
  const int32_t k = seg_adapter[seg];
  const int32_t begin = seg_start[seg] + int32_t(blockIdx.y) * kSgmvRows;
  const int32_t end = min(seg_start[seg + 1], begin + kSgmvRows);
  if (k < 0 || k >= num_adapters || begin >= end) return;  // the whole block leaves together
  const int32_t nrows = end - begin;
  __shared__ float ys[kSgmvRows][kMaxCudaLoraRank];
  const float sc = scale[k];
  for (int32_t t = threadIdx.x; t < kSgmvRows * rank; t += blockDim.x) {
    const int32_t i = t / rank, r = t % rank;
    ys[i][r] = i < nrows ? y[(begin + i) * y_stride + r] * sc : 0.0f;
  }
  __syncthreads();
  const int32_t o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= out_dim) return;
  const T* b = bt + int64_t(k) * rank * out_dim + o;
  float acc[kSgmvRows];
#pragma unroll
  for (int i = 0; i < kSgmvRows; ++i) acc[i] = 0.0f;
  for (int32_t r = 0; r < rank; ++r) {
    const float w = ToFloat(b[int64_t(r) * out_dim]);
#pragma unroll
    for (int i = 0; i < kSgmvRows; ++i) acc[i] += ys[i][r] * w;
  }
  for (int32_t i = 0; i < nrows; ++i) {
    T* po = out + (begin + i) * out_stride + o;
    *po = FromFloat<T>(ToFloat(*po) + acc[i]);
  }
}

}  // namespace marlaas::kernels::cuda

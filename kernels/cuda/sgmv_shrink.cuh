// SGMV shrink kernel (launcher: sgmv_shrink.cu, API: lora_cuda.h): for each segment s of rows
// sharing adapter k = seg_adapter[s], y[i, r] = x[i] · A[k, r]. A block takes a tile of up to
// kSgmvRows rows of one segment and stages x and A through shared memory kSgmvChunk columns at a
// time, so each element of A is loaded once per tile instead of once per row. Assumes what the
// launcher checked; segments whose adapter index is out of range are not written.
#pragma once

#include <cstdint>

#include "kernels/cuda/dtype.cuh"
#include "kernels/cuda/lora_cuda.h"

namespace marlaas::kernels::cuda {

inline constexpr int kSgmvRows = 16;
inline constexpr int kSgmvChunk = 128;
inline constexpr int kSgmvShrinkThreads = 256;
inline constexpr int kSgmvShrinkOutputs = kSgmvRows * kMaxCudaLoraRank / kSgmvShrinkThreads;

// grid (ceil(rows / kSgmvRows), num_segments), block kSgmvShrinkThreads. A block whose tile
// starts past the end of its segment returns at once (the grid is sized for the longest
// possible segment: all rows).
template <typename T>
__global__ void __launch_bounds__(kSgmvShrinkThreads)
    SgmvShrinkKernel(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ a,
                     int32_t num_adapters, int32_t rank, int32_t in_dim,
                     const int32_t* __restrict__ seg_start, const int32_t* __restrict__ seg_adapter,
                     float* __restrict__ y, int64_t y_stride) {
  const int32_t seg = blockIdx.y;
  const int32_t k = seg_adapter[seg];
  const int32_t begin = seg_start[seg] + int32_t(blockIdx.x) * kSgmvRows;
  const int32_t end = min(seg_start[seg + 1], begin + kSgmvRows);
  if (k < 0 || k >= num_adapters || begin >= end) return;
  const int32_t nrows = end - begin;
  __shared__ float xs[kSgmvRows][kSgmvChunk + 1];
  __shared__ float as[kMaxCudaLoraRank][kSgmvChunk + 1];
  const T* ak = a + int64_t(k) * rank * in_dim;
  // Thread t owns outputs t, t + blockDim, ... of the tile's nrows x rank (row-major).
  float acc[kSgmvShrinkOutputs];
  for (int j = 0; j < kSgmvShrinkOutputs; ++j) acc[j] = 0.0f;
  const int32_t outputs = nrows * rank;
  for (int32_t c0 = 0; c0 < in_dim; c0 += kSgmvChunk) {
    const int32_t width = min(kSgmvChunk, in_dim - c0);
    for (int32_t t = threadIdx.x; t < nrows * width; t += blockDim.x) {
      const int32_t i = t / width, c = t % width;
      xs[i][c] = ToFloat(x[(begin + i) * x_stride + c0 + c]);
    }
    for (int32_t t = threadIdx.x; t < rank * width; t += blockDim.x) {
      const int32_t r = t / width, c = t % width;
      as[r][c] = ToFloat(ak[int64_t(r) * in_dim + c0 + c]);
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kSgmvShrinkOutputs; ++j) {
      const int32_t out = threadIdx.x + j * kSgmvShrinkThreads;
      if (out < outputs) {
        const int32_t i = out / rank, r = out % rank;
        float sum = 0.0f;
        for (int32_t c = 0; c < width; ++c) sum += xs[i][c] * as[r][c];
        acc[j] += sum;
      }
    }
    __syncthreads();  // before the next chunk overwrites xs and as
  }
#pragma unroll
  for (int j = 0; j < kSgmvShrinkOutputs; ++j) {
    const int32_t out = threadIdx.x + j * kSgmvShrinkThreads;
    if (out < outputs) y[(begin + out / rank) * y_stride + out % rank] = acc[j];
  }
}

}  // namespace marlaas::kernels::cuda

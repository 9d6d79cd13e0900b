// Multi-LoRA ops on a CUDA device, the GPU counterparts of kernels/lora_ops.h: y = x·Aᵀ (shrink)
// and out += scale·y·Bᵀ (expand), with a different adapter per row (BGMV, decode) or per
// contiguous row segment (SGMV, prefill and training). Activations and adapter weights are f32,
// bf16 or f16 (one dtype per call); the rank-sized intermediate y is always f32, and every sum
// accumulates in f32.
//
// Adapters come stacked: every adapter of the batch in one tensor, zero-padded to one rank (a
// zero row of A and of Bᵀ adds nothing, so a rank-8 adapter padded to 16 computes exactly its
// rank-8 product).
//
// Contract: each launcher checks shapes, dtypes, strides and that every tensor lives on the
// current device, then enqueues its kernel on `stream` (0: the legacy default stream) and returns
// without synchronising. The kernels assume what was checked. Adapter indices live on the device
// and are not checked by the launcher: an index < 0 means "base only" (the row is not touched),
// and so does an index >= the number of stacked adapters. Thread-safe; outputs must not alias
// inputs.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "kernels/cuda/tensor_ref.h"
#include "kernels/lora_limits.h"

namespace marlaas::kernels::cuda {

using kernels::kMaxCudaLoraRank;  // kernels/lora_limits.h

struct LoraStack {
  TensorRef a;      // [num_adapters, rank, in_dim], contiguous (PEFT's lora_A.weight)
  TensorRef bt;     // [num_adapters, rank, out_dim], contiguous (lora_B.weight transposed)
  TensorRef scale;  // [num_adapters] f32: alpha / rank of each adapter
};

// x [rows, in_dim], y [rows, rank] f32, row_adapter [rows] i32:
// y[i] = x[i] · A[row_adapter[i]]ᵀ.
Status BgmvShrink(const TensorRef& x, const LoraStack& stack, const TensorRef& row_adapter,
                  const TensorRef& y, cudaStream_t stream);
// y [rows, rank] f32, out [rows, out_dim]: out[i] += scale[k] · y[i] · Bᵀ[k], k = row_adapter[i].
Status BgmvExpand(const TensorRef& y, const LoraStack& stack, const TensorRef& row_adapter,
                  const TensorRef& out, cudaStream_t stream);

// Segments: seg_start [num + 1] i32 (non-decreasing, seg_start[num] <= rows), seg_adapter [num]
// i32; rows [seg_start[s], seg_start[s+1]) use adapter seg_adapter[s]. Both live on the device
// and are assumed valid.
Status SgmvShrink(const TensorRef& x, const LoraStack& stack, const TensorRef& seg_start,
                  const TensorRef& seg_adapter, const TensorRef& y, cudaStream_t stream);
Status SgmvExpand(const TensorRef& y, const LoraStack& stack, const TensorRef& seg_start,
                  const TensorRef& seg_adapter, const TensorRef& out, cudaStream_t stream);

// The checks the four launchers share, exposed for tests. `shrink`: `act` is x [rows, in_dim];
// otherwise `act` is out [rows, out_dim]. Fills the problem's sizes.
struct LoraShape {
  int32_t rows = 0, in_dim = 0, out_dim = 0, rank = 0, num_adapters = 0;
};
Result<LoraShape> CheckLoraArgs(const char* op, bool shrink, const TensorRef& act,
                                const LoraStack& stack, const TensorRef& y);
// seg_start [num + 1] and seg_adapter [num], contiguous i32, num <= 65535 (one grid row each);
// returns num.
Result<int32_t> CheckSegments(const char* op, const TensorRef& seg_start,
                              const TensorRef& seg_adapter);

}  // namespace marlaas::kernels::cuda

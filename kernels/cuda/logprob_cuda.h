// The fused log-softmax + gather on a CUDA device, the GPU counterpart of kernels/logprob_ops.h:
//   logprob[i] = z[i, t_i] - logsumexp_v z[i, v],   z = logits * inv_temperature,
// one block per row, one pass over the row (an online max and sum of exp), f32 arithmetic on
// f32, bf16 or f16 logits. The backward writes
//   dlogits[i, v] = g_i * inv_temperature * (1[v == t_i] - exp(z[i, v] - lse_i))
// in the logits' dtype.
//
// Contract: the launchers check shapes, dtypes, strides and that every tensor lives on the
// current device, then enqueue on `stream` without synchronising. Targets live on the device
// and are not checked: a target outside [0, vocab) gives a NaN log-prob (and, in the backward,
// no one-hot term). Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"
#include "kernels/cuda/tensor_ref.h"

namespace marlaas::kernels::cuda {

// logits [rows, vocab], targets [rows] i32, logprob [rows] f32, lse [rows] f32 or an empty
// TensorRef (ndim 0) when the backward is not needed.
Status TokenLogprobs(const TensorRef& logits, const TensorRef& targets, float inv_temperature,
                     const TensorRef& logprob, const TensorRef& lse, cudaStream_t stream);
// dlogits has the logits' shape and dtype (it may not alias them); lse and grad_logprob [rows] f32.
Status TokenLogprobsBackward(const TensorRef& logits, const TensorRef& targets,
                             float inv_temperature, const TensorRef& lse,
                             const TensorRef& grad_logprob, const TensorRef& dlogits,
                             cudaStream_t stream);

}  // namespace marlaas::kernels::cuda

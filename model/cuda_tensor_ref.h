// RefOf: a LibTorch tensor as the kernels/cuda launchers' TensorRef (pointer, dtype, sizes,
// strides), for the model's CUDA paths. Only built with CUDA. Thread-safe.
#pragma once

#include "kernels/cuda/tensor_ref.h"
#include "model/torch_pch.h"

namespace marlaas::model {

// REQUIRES: t is f32, bf16, f16 or int32 with at most kMaxTensorDims dimensions (TORCH_CHECK).
kernels::cuda::TensorRef RefOf(const torch::Tensor& t);

// Throws (TORCH_CHECK) with the status's message when a launcher refused or failed.
void CheckLaunch(const Status& status);

// Our launches go on the legacy default stream (stream 0). That orders them with LibTorch's ops
// only while LibTorch's current stream on `device` is its default one (id 0): throws otherwise,
// rather than race (e.g. under a caller's CUDAStreamGuard).
void CheckDefaultStream(const torch::Device& device);

}  // namespace marlaas::model

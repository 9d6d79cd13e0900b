// Log-probabilities of chosen tokens as an autograd op over the fused kernel (kernels/
// logprob_ops.h on the CPU, kernels/cuda/logprob_cuda.h for logits on a CUDA device): forward keeps
// only logsumexp per row; backward writes d logits. The trainer uses this for π_θ(token) with the
// same temperature the rollout sampled at, so the importance ratio compares like with like (see
// model/sampler.h).
#pragma once

#include "model/torch_pch.h"

namespace marlaas::model {

// logits: [N, vocab] f32; targets: [N] int64. Returns [N] = log softmax(logits / T)[target].
torch::Tensor TokenLogprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                            float temperature = 1.0f);

}  // namespace marlaas::model

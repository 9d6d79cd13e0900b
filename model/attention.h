// Attend: masked grouped-query attention for the model's full-sequence forwards (Hidden,
// HiddenShared): softmax(scale·q·kᵀ, -inf where masked)·v per row and query head, query head h
// reading key/value head h / (H / KV). On the CPU in f32 it is one autograd op over the attention
// kernels (kernels/attention_ops.h), whose backward keeps the softmax it computed; elsewhere
// LibTorch ops (matmul, softmax). Why the CPU op: LibTorch 1.13's CPU bmm runs one small matrix
// product per row and head, and the attention's backward took ~30% of a trainer step of short
// rows (bench_train_step, 32 tenants of 4 rows of 8 tokens).
//
// q [R, H, T, D]; k and v [R, KV, S, D] with H a multiple of KV; masked bool, [1 or R, 1, T, S]
// (true: not attended). Returns [R, H, T, D]. A query position that attends to nothing gets 0 on
// the CPU (LibTorch's softmax gives NaN there; the model's masks never do that). Gradients reach
// q, k and v. Checked: ranks, shapes and the mask's dtype, with errors that name them.
#pragma once

#include "model/torch_pch.h"

namespace marlaas::model {

torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& masked, double scale);

// The same with LibTorch ops, on any device (what Attend runs off the CPU; tests compare).
torch::Tensor AttendWithLibTorch(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& masked, double scale);

}  // namespace marlaas::model

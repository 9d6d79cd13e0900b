// Adding each batch row's LoRA delta, scale·(x·Aᵀ)·Bᵀ, to a projection's output. With autograd
// on, per adapter group with LibTorch ops (gradients reach each adapter's flat tensor); with
// autograd off, through the SGMV kernels on contiguous row segments.
#pragma once

#include "model/transformer.h"

namespace marlaas::model {

// x: [B, T, in], y: [B, T, out] (the base projection). Returns y plus the deltas.
torch::Tensor AddLoraDelta(const torch::Tensor& x, const torch::Tensor& y, int layer,
                           LoraTarget target, const LoraRouting& lora);

}  // namespace marlaas::model

// SegmentedLoraDelta: y plus each row segment's LoRA delta, scale·(x·Aᵀ)·Bᵀ, as one autograd op on
// the CPU whose forward and backward are the SGMV kernels (kernels/lora_ops.h): the trainer's
// LoRA path (AddLoraDelta with autograd on, on the CPU).
//
// Why not LibTorch ops: per adapted projection, the segments' products with autograd were a
// gather, two stacks, two batched products, a scale and a scatter, and LibTorch 1.13's CPU bmm
// backward loops over its batch (a 32-tenant step of the tiny model ran 55k aten::select in
// BmmBackward0, 29% of the step). Here a projection is one node: forward a shrink and an expand,
// backward one shrink (g·B), one expand (dx) and two weight-gradient passes (dA, dBᵀ).
//
// Contract: x [N, in] and y [N, out] f32 on the CPU; a[j] [rank_j, in] and bt[j] [rank_j, out] f32
// (Bᵀ), or the same values flat ([rank_j·in], [rank_j·out]: LoraViews' parts, whose gradients
// then need no reshape), rank_j <= kernels::kMaxLoraRank; segment s covers rows [start[s],
// start[s+1]) with adapter[s] an index into a/bt or -1 (no delta); start[0] = 0, non-decreasing,
// start.back() = N. y is updated in place and returned unless it is a view or a leaf that requires
// grad. Gradients reach x, y and every a[j]/bt[j] that requires them (views of a flat adapter pass
// them on to it). Checked: shapes, dtypes, devices and ranges, with errors that name the argument.
#pragma once

#include <cstdint>
#include <vector>

#include "model/torch_pch.h"

namespace marlaas::model {

torch::Tensor SegmentedLoraDelta(const torch::Tensor& x, const torch::Tensor& y,
                                 const std::vector<torch::Tensor>& a,
                                 const std::vector<torch::Tensor>& bt,
                                 const std::vector<float>& scale, const std::vector<int32_t>& start,
                                 const std::vector<int32_t>& adapter);

}  // namespace marlaas::model

// Adding each row's LoRA delta, scale·(x·Aᵀ)·Bᵀ, to a projection's output. Rows are grouped in
// contiguous segments that share an adapter (-1: none). With autograd on, gradients reach the
// adapters' flat tensors: on the CPU through one autograd op over the SGMV kernels (forward and
// backward; model/lora_grad.h), elsewhere through LibTorch ops; with autograd off, the SGMV
// kernels (BGMV when every segment is one row, as in decoding) do the work in place: on the CPU
// over the adapters' own tensors, on a CUDA device over a LoraPool's stacks (without a pool,
// CUDA rows take the LibTorch path). A pool on the CPU runs LibTorch ops over its stacks.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <vector>

#include "model/lora_adapter.h"
#include "model/lora_views.h"
#include "model/torch_pch.h"

namespace marlaas::model {

class LoraPool;

struct LoraSegments {
  std::vector<const LoraAdapter*> adapters;
  std::vector<int32_t> start;    // segment s covers rows [start[s], start[s+1]); size num + 1
  std::vector<int32_t> adapter;  // index into adapters, -1 for none; size num
  // With autograd: each adapter's matrices split from its flat once for the whole forward
  // (LoraViews::Of; see model/lora_views.h), used instead of its own views. Empty: the adapters'.
  std::vector<std::shared_ptr<const LoraViews>> views;
  // The gather, kept and destination rows of each batched group of segments (keyed by its
  // segments), made at the group's first projection and reused by every other of the forward
  // (on a device, three host-to-device copies each time otherwise).
  mutable std::map<std::vector<size_t>, std::array<torch::Tensor, 3>> batch_rows;
  // With a pool (CUDA rollout): `adapter` holds pool slots instead and `adapters` is unused;
  // start and adapter as int32 tensors on the pool's device (SetPoolSegments makes them once for
  // every projection of a forward).
  const LoraPool* pool = nullptr;
  // With autograd on the CPU: the LibTorch ops (what a CUDA device runs) instead of the kernels'
  // op. For tests and comparisons.
  bool libtorch_ops = false;
  torch::Tensor device_start, device_adapter;
  void SetPoolSegments(const LoraPool* p);
  // Blocks of `rows_each` rows whose adapters are given per block; consecutive blocks with the
  // same adapter are merged into one segment.
  static LoraSegments Uniform(std::vector<const LoraAdapter*> adapters,
                              const std::vector<int32_t>& adapter_per_block, int32_t rows_each);
};

// x: [N, in] rows, y: [N, out] their base projection. Returns y plus the deltas; with autograd
// off, y is updated in place (when contiguous) and returned; with autograd on the CPU, too, unless
// y is a view or a leaf that requires grad.
torch::Tensor AddLoraDelta(const torch::Tensor& x, const torch::Tensor& y, int layer,
                           LoraTarget target, const LoraSegments& segs);

}  // namespace marlaas::model

// LoraViews: one tenant's A and Bᵀ matrices for one forward with autograd, made by splitting its
// flat tensor once (split_with_sizes) instead of one narrow per matrix (LoraAdapter::A/BT).
//
// Why: the backward of a narrow is a zero-filled tensor the size of the whole flat with the
// slice's gradient copied in, then added to the flat's gradient. With every target adapted that
// is two full-size fills and adds per projection per layer: 56 per tenant in a step of the tiny
// model, about 3.5 ms per tenant on the 2-core machine (bench_train_step, 32 tenants of 4 rows of
// 8 tokens: 2.2x the step of one tenant with the same rows). The backward of one split is one
// cat into the flat's gradient, whatever the number of matrices.
// The views share the flat's storage; make them per forward (they hold its autograd graph).
#pragma once

#include <memory>
#include <vector>

#include "model/lora_adapter.h"

namespace marlaas::model {

class LoraViews {
 public:
  explicit LoraViews(const LoraAdapter& adapter);

  // A [rank, in] and Bᵀ [rank, out] of (layer, t), as LoraAdapter::A/BT. REQUIRES: has(t).
  const torch::Tensor& A(int layer, LoraTarget t) const { return a_[Index(layer, t)]; }
  const torch::Tensor& BT(int layer, LoraTarget t) const { return bt_[Index(layer, t)]; }
  // The same values as the split's 1-D parts [rank·in] and [rank·out]: for an op that reads them
  // by pointer (SegmentedLoraDelta), whose gradients then skip a reshape per matrix (with 32
  // tenants, ~1.8k ViewBackward nodes a step of the tiny model).
  const torch::Tensor& APart(int layer, LoraTarget t) const { return a_part_[Index(layer, t)]; }
  const torch::Tensor& BTPart(int layer, LoraTarget t) const { return bt_part_[Index(layer, t)]; }

  // One per adapter (nullptr for a null adapter), for LoraSegments::views.
  static std::vector<std::shared_ptr<const LoraViews>> Of(
      const std::vector<const LoraAdapter*>& adapters);

 private:
  static size_t Index(int layer, LoraTarget t) {
    return size_t(layer) * kNumLoraTargets + size_t(t);
  }
  // Undefined where the adapter lacks the target.
  std::vector<torch::Tensor> a_, bt_, a_part_, bt_part_;
};

}  // namespace marlaas::model

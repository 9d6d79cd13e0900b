// LoraAdapter: one tenant's LoRA weights as one flat f32 tensor in AdapterLayout order (the
// same bytes the adapter store, the optimizer and a cross-GPU broadcast handle), with A and B of
// each (layer, target) as views into it. For training, `flat` is the autograd leaf. Imports and
// exports PEFT's layout (adapter_config.json + adapter_model.safetensors, PEFT key names).
// Not thread-safe while training; read-only use from several threads is fine.
#pragma once

#include <string>

#include "base/status.h"
#include "model/base_weights.h"
#include "model/torch_pch.h"
#include "shm/adapter_layout.h"

namespace marlaas::model {

class LoraAdapter {
 public:
  LoraAdapter() = default;
  // A fresh adapter as PEFT initialises one: A ~ kaiming-uniform(a=sqrt(5)), B = 0, so it starts
  // as the base model. Deterministic for a seed.
  static Result<LoraAdapter> Create(const BaseWeights& base, uint32_t rank, float alpha,
                                    uint32_t target_mask, uint64_t seed);
  // An adapter of `layout` holding a copy of `data` (layout.NumElements() floats).
  static Result<LoraAdapter> FromFlat(const AdapterLayout& layout, const float* data);
  // An adapter of `layout` over `flat` (layout.NumElements() f32 elements, contiguous, on any
  // device), taken as is (no copy).
  static Result<LoraAdapter> FromFlatTensor(const AdapterLayout& layout, torch::Tensor flat);
  // Moves the weights to `device` (a no-op when already there); the new `flat` is a leaf that
  // does not require grad. Call before building an optimizer over it.
  void MoveTo(const torch::Device& device);
  // Reads a PEFT adapter directory; checks it against `base`. A field of adapter_config.json of
  // the wrong JSON type or out of range ('r' in [1, 4096], 'lora_alpha' > 0), or a weight that is
  // not floating point, is kInvalidArgument naming the directory and the field or tensor.
  static Result<LoraAdapter> ImportPeft(const std::string& dir, const BaseWeights& base);
  // Writes adapter_config.json and adapter_model.safetensors (atomically each).
  Status ExportPeft(const std::string& dir, const std::string& base_model_name) const;

  const AdapterLayout& layout() const { return layout_; }
  float scale() const { return layout_.alpha / float(layout_.rank); }
  bool has(LoraTarget t) const { return layout_.has(t); }
  torch::Tensor& flat() { return flat_; }
  const torch::Tensor& flat() const { return flat_; }
  // Views of `flat`: A [rank, in]; Bᵀ [rank, out] as stored; B [out, rank] (= BT().t(), not
  // contiguous). REQUIRES: has(t).
  torch::Tensor A(int layer, LoraTarget t) const;
  torch::Tensor BT(int layer, LoraTarget t) const;
  torch::Tensor B(int layer, LoraTarget t) const { return BT(layer, t).t(); }
  // Raw pointers to the same data, for the CPU kernels (no tensor ops on the hot path).
  const float* APtr(int layer, LoraTarget t) const {
    return flat_.data_ptr<float>() + layout_.OffsetOfA(uint32_t(layer), t);
  }
  const float* BTPtr(int layer, LoraTarget t) const {
    return flat_.data_ptr<float>() + layout_.OffsetOfB(uint32_t(layer), t);
  }

 private:
  AdapterLayout layout_;
  torch::Tensor flat_;
};

// The layout an adapter of this rank/alpha/targets has on `base`.
AdapterLayout LayoutFor(const BaseWeights& base, uint32_t rank, float alpha, uint32_t target_mask);

}  // namespace marlaas::model

// LoraPool: LoRA adapters resident on one device, stacked per projection the way the CUDA
// multi-LoRA kernels take them (kernels/cuda/lora_cuda.h, LoraStack): for each (layer, target)
// an A stack [slots, max_rank, in] and a Bᵀ stack [slots, max_rank, out], zero past each
// adapter's rank and for the targets it does not adapt, plus one scale (alpha / rank) per slot.
//
// A slot holds one adapter object (one version of one tenant's adapter). The Generator acquires
// a slot when a sequence using the adapter joins and releases it when the sequence leaves, so a
// tenant's old and new versions are both resident while the old version's sequences finish, and
// an adapter is copied to the device once however many sequences use it. The stacks grow (slots
// and rank doubled, contents kept) when a new adapter does not fit; a freed slot is reused.
// Memory: slots × max_rank × Σ(in + out) × layers × 4 bytes. One thread at a time.
#pragma once

#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "kernels/lora_limits.h"
#include "model/base_weights.h"
#include "model/lora_adapter.h"

namespace marlaas::model {

class LoraPool {
 public:
  // Capacity grows from `slots` slots of rank `max_rank` as adapters arrive; ranks above
  // kMaxPoolRank are refused (the CUDA kernels' limit).
  LoraPool(const BaseWeights& base, torch::Device device, int slots = 8, uint32_t max_rank = 16);

  static constexpr uint32_t kMaxPoolRank = uint32_t(kernels::kMaxCudaLoraRank);

  // The slot holding `adapter`, copying it in first when it is not resident. Each Acquire is
  // matched by one Release. kInvalidArgument when the adapter does not fit the base (layers,
  // dimensions) or its rank exceeds kMaxPoolRank.
  Result<int> Acquire(const std::shared_ptr<const LoraAdapter>& adapter);
  void Release(const LoraAdapter* adapter);
  // The slot of a resident adapter, -1 if none.
  int SlotOf(const LoraAdapter* adapter) const;

  int slots() const { return slots_; }
  uint32_t max_rank() const { return max_rank_; }
  int resident() const { return int(by_adapter_.size()); }
  torch::Device device() const { return device_; }
  // The stacks (contiguous f32 on the device) and the scales [slots] f32.
  const torch::Tensor& A(int layer, LoraTarget t) const { return a_[Index(layer, t)]; }
  const torch::Tensor& BT(int layer, LoraTarget t) const { return bt_[Index(layer, t)]; }
  const torch::Tensor& scale() const { return scale_; }

 private:
  struct Entry {
    std::shared_ptr<const LoraAdapter> adapter;
    int slot = -1;
    int uses = 0;
  };
  size_t Index(int layer, LoraTarget t) const {
    return size_t(layer) * kNumLoraTargets + size_t(t);
  }
  void Grow(int slots, uint32_t max_rank);
  void Load(int slot, const LoraAdapter& adapter);

  int num_layers_;
  std::vector<int64_t> in_, out_;  // per target
  torch::Device device_;
  int slots_ = 0;
  uint32_t max_rank_ = 0;
  std::vector<torch::Tensor> a_, bt_;
  torch::Tensor scale_;
  std::set<int> free_;  // free slots; the lowest is taken first
  std::unordered_map<const LoraAdapter*, Entry> by_adapter_;
};

}  // namespace marlaas::model

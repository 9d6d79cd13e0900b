#include "model/lora_pool.h"

#include <algorithm>

namespace marlaas::model {

LoraPool::LoraPool(const BaseWeights& base, torch::Device device, int slots, uint32_t max_rank)
    : num_layers_(base.config.num_layers),
      // A CUDA device named without an index ("cuda") becomes the one tensors report ("cuda:0").
      device_(torch::empty({0}, torch::TensorOptions().device(device)).device()) {
  for (int t = 0; t < kNumLoraTargets; ++t) {
    in_.push_back(base.InDim(LoraTarget(t)));
    out_.push_back(base.OutDim(LoraTarget(t)));
  }
  Grow(std::max(1, slots), std::clamp<uint32_t>(max_rank, 1, kMaxPoolRank));
}

void LoraPool::Grow(int slots, uint32_t max_rank) {
  const auto options = torch::TensorOptions(torch::kFloat32).device(device_);
  std::vector<torch::Tensor> a, bt;
  for (int l = 0; l < num_layers_; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      a.push_back(torch::zeros({slots, int64_t(max_rank), in_[size_t(t)]}, options));
      bt.push_back(torch::zeros({slots, int64_t(max_rank), out_[size_t(t)]}, options));
      if (slots_ > 0) {  // keep what is resident: old slots and ranks are a corner of the new
        const size_t i = Index(l, LoraTarget(t));
        a.back().narrow(0, 0, slots_).narrow(1, 0, max_rank_).copy_(a_[i]);
        bt.back().narrow(0, 0, slots_).narrow(1, 0, max_rank_).copy_(bt_[i]);
      }
    }
  }
  auto scale = torch::zeros({slots}, options);
  if (slots_ > 0) scale.narrow(0, 0, slots_).copy_(scale_);
  for (int s = slots_; s < slots; ++s) free_.insert(s);
  a_ = std::move(a);
  bt_ = std::move(bt);
  scale_ = std::move(scale);
  slots_ = slots;
  max_rank_ = max_rank;
}

void LoraPool::Load(int slot, const LoraAdapter& adapter) {
  const int64_t r = adapter.layout().rank;
  for (int l = 0; l < num_layers_; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const size_t i = Index(l, LoraTarget(t));
      auto a = a_[i][slot];
      auto bt = bt_[i][slot];
      a.zero_();
      bt.zero_();
      if (!adapter.has(LoraTarget(t))) continue;
      a.narrow(0, 0, r).copy_(adapter.A(l, LoraTarget(t)));
      bt.narrow(0, 0, r).copy_(adapter.BT(l, LoraTarget(t)));
    }
  }
  scale_[slot].fill_(adapter.scale());
}

Result<int> LoraPool::Acquire(const std::shared_ptr<const LoraAdapter>& adapter) {
  auto it = by_adapter_.find(adapter.get());
  if (it != by_adapter_.end()) {
    ++it->second.uses;
    return it->second.slot;
  }
  const AdapterLayout& layout = adapter->layout();
  if (layout.rank == 0 || layout.rank > kMaxPoolRank) {
    return Status(StatusCode::kInvalidArgument,
                  "LoRA rank " + std::to_string(layout.rank) + " is outside 1-" +
                      std::to_string(kMaxPoolRank) + " (the CUDA multi-LoRA kernels' limit)");
  }
  if (int(layout.num_layers) != num_layers_) {
    return Status(StatusCode::kInvalidArgument, "adapter has " + std::to_string(layout.num_layers) +
                                                    " layers, the base " +
                                                    std::to_string(num_layers_));
  }
  for (int t = 0; t < kNumLoraTargets; ++t) {
    if (layout.has(LoraTarget(t)) && (int64_t(layout.in_dim[t]) != in_[size_t(t)] ||
                                      int64_t(layout.out_dim[t]) != out_[size_t(t)])) {
      return Status(StatusCode::kInvalidArgument, std::string("adapter's ") +
                                                      LoraTargetName(LoraTarget(t)) +
                                                      " dimensions do not match the base");
    }
  }
  if (free_.empty() || layout.rank > max_rank_) {
    uint32_t rank = max_rank_;
    while (rank < layout.rank) rank *= 2;
    Grow(free_.empty() ? slots_ * 2 : slots_, std::min(rank, kMaxPoolRank));
  }
  const int slot = *free_.begin();
  free_.erase(free_.begin());
  Load(slot, *adapter);
  by_adapter_[adapter.get()] = Entry{adapter, slot, 1};
  return slot;
}

void LoraPool::Release(const LoraAdapter* adapter) {
  auto it = by_adapter_.find(adapter);
  if (it == by_adapter_.end() || --it->second.uses > 0) return;
  free_.insert(it->second.slot);
  by_adapter_.erase(it);
}

int LoraPool::SlotOf(const LoraAdapter* adapter) const {
  auto it = by_adapter_.find(adapter);
  return it == by_adapter_.end() ? -1 : it->second.slot;
}

}  // namespace marlaas::model

#include "model/lora_views.h"

namespace marlaas::model {

LoraViews::LoraViews(const LoraAdapter& adapter) {
  const AdapterLayout& l = adapter.layout();
  const int64_t rank = int64_t(l.rank);
  // AdapterLayout order: per layer, per adapted target, A then Bᵀ, back to back.
  std::vector<int64_t> sizes;
  int64_t offset = 0;
  for (uint32_t layer = 0; layer < l.num_layers; ++layer) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!l.has(LoraTarget(t))) continue;
      TORCH_CHECK(uint64_t(offset) == l.OffsetOfA(layer, LoraTarget(t)),
                  "LoRA layout is not A, B per target per layer");
      sizes.push_back(rank * int64_t(l.in_dim[size_t(t)]));
      sizes.push_back(rank * int64_t(l.out_dim[size_t(t)]));
      offset += sizes[sizes.size() - 2] + sizes.back();
    }
  }
  const std::vector<torch::Tensor> parts = adapter.flat().split_with_sizes(sizes, 0);
  a_.resize(size_t(l.num_layers) * kNumLoraTargets);
  bt_.resize(a_.size());
  a_part_.resize(a_.size());
  bt_part_.resize(a_.size());
  size_t k = 0;
  for (uint32_t layer = 0; layer < l.num_layers; ++layer) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!l.has(LoraTarget(t))) continue;
      const size_t i = Index(int(layer), LoraTarget(t));
      a_part_[i] = parts[k++];
      bt_part_[i] = parts[k++];
      a_[i] = a_part_[i].view({rank, -1});
      bt_[i] = bt_part_[i].view({rank, -1});
    }
  }
}

std::vector<std::shared_ptr<const LoraViews>> LoraViews::Of(
    const std::vector<const LoraAdapter*>& adapters) {
  std::vector<std::shared_ptr<const LoraViews>> out;
  for (const LoraAdapter* a : adapters)
    out.push_back(a != nullptr ? std::make_shared<const LoraViews>(*a) : nullptr);
  return out;
}

}  // namespace marlaas::model

#include "model/kv_cache.h"

namespace marlaas::model {

KvCache::KvCache(const ModelConfig& c, int64_t initial_capacity, torch::Device device) {
  const auto options = torch::TensorOptions(torch::kFloat32).device(device);
  for (int l = 0; l < c.num_layers; ++l) {
    k_.push_back(torch::empty({c.num_kv_heads, initial_capacity, c.head_dim}, options));
    v_.push_back(torch::empty({c.num_kv_heads, initial_capacity, c.head_dim}, options));
  }
  capacity_ = initial_capacity;
}

void KvCache::Reserve(int64_t capacity) {
  if (capacity <= capacity_) return;
  const int64_t grown = std::max(capacity, capacity_ * 2);
  for (size_t l = 0; l < k_.size(); ++l) {
    auto k = torch::empty({k_[l].size(0), grown, k_[l].size(2)}, k_[l].options());
    auto v = torch::empty({v_[l].size(0), grown, v_[l].size(2)}, v_[l].options());
    k.narrow(1, 0, capacity_).copy_(k_[l]);
    v.narrow(1, 0, capacity_).copy_(v_[l]);
    k_[l] = k;
    v_[l] = v;
  }
  capacity_ = grown;
}

void KvCache::Append(int layer, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t t = k.size(1);
  Reserve(length_ + t);
  k_[size_t(layer)].narrow(1, length_, t).copy_(k);
  v_[size_t(layer)].narrow(1, length_, t).copy_(v);
}

torch::Tensor KvCache::Keys(int layer, int64_t pending) const {
  return k_[size_t(layer)].narrow(1, 0, length_ + pending);
}

torch::Tensor KvCache::Values(int layer, int64_t pending) const {
  return v_[size_t(layer)].narrow(1, 0, length_ + pending);
}

}  // namespace marlaas::model

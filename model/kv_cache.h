// KvCache: one sequence's attention keys and values, per layer, growing as tokens are added.
// Owned by the sequence; used by one thread at a time. Lives on `device` (the model's).
#pragma once

#include <vector>

#include "model/config.h"
#include "model/torch_pch.h"

namespace marlaas::model {

class KvCache {
 public:
  explicit KvCache(const ModelConfig& config, int64_t initial_capacity = 64,
                   torch::Device device = torch::kCPU);

  int64_t length() const { return length_; }
  // Appends k, v [kv_heads, t, head_dim] for `layer`; the new length becomes visible after
  // Commit(t) once every layer has appended.
  void Append(int layer, const torch::Tensor& k, const torch::Tensor& v);
  void Commit(int64_t t) { length_ += t; }
  // Keys/values [kv_heads, length + pending, head_dim] of `layer` (pending: appended, uncommitted).
  torch::Tensor Keys(int layer, int64_t pending) const;
  torch::Tensor Values(int layer, int64_t pending) const;
  void Clear() { length_ = 0; }

 private:
  void Reserve(int64_t capacity);
  std::vector<torch::Tensor> k_, v_;  // [kv_heads, capacity, head_dim] per layer
  int64_t length_ = 0;
  int64_t capacity_ = 0;
};

}  // namespace marlaas::model

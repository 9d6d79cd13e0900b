// KvCache: one sequence's attention keys and values, per layer, growing as tokens are added.
// Owned by the sequence; used by one thread at a time. The storage is a slot of a KvArena: one
// of its own (the first constructor) or one shared with other sequences (the second), whose
// decode rows Transformer::Step then batches. Move-only: the slot is released on destruction.
#pragma once

#include <algorithm>
#include <memory>

#include "model/config.h"
#include "model/kv_arena.h"
#include "model/torch_pch.h"

namespace marlaas::model {

class KvCache {
 public:
  // A cache in an arena of its own, on `device`.
  explicit KvCache(const ModelConfig& config, int64_t initial_capacity = 64,
                   torch::Device device = torch::kCPU);
  // A cache in a slot of `arena` (shared with the arena's other caches).
  explicit KvCache(std::shared_ptr<KvArena> arena);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t length() const { return length_; }
  // Appends k, v [kv_heads, t, head_dim] for `layer`; the new length becomes visible after
  // Commit(t) once every layer has appended.
  void Append(int layer, const torch::Tensor& k, const torch::Tensor& v);
  void Commit(int64_t t) { length_ += t; }
  // Keys/values [kv_heads, length + pending, head_dim] of `layer` (pending: appended, uncommitted).
  torch::Tensor Keys(int layer, int64_t pending) const;
  torch::Tensor Values(int layer, int64_t pending) const;
  void Clear() { length_ = 0; }
  // Back to its first `length` positions (at most its length): what a failed step committed goes.
  void Rewind(int64_t length) { length_ = std::min(length_, std::max<int64_t>(length, 0)); }
  // Becomes a copy of `other` (same arena): its length and every layer's keys and values. For a
  // sequence whose prompt another one just computed.
  void CopyFrom(const KvCache& other);

  KvArena* arena() const { return arena_.get(); }
  int64_t slot() const { return slot_; }

 private:
  std::shared_ptr<KvArena> arena_;
  int64_t slot_ = -1;
  int64_t length_ = 0;
};

}  // namespace marlaas::model

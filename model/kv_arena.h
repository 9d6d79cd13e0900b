// KvArena: the attention keys and values of many sequences in one tensor per layer (keys and
// values each [slots, kv_heads, capacity, head_dim]), so that Transformer::Step can append the
// new key of every decoding row with one index_put and gather every row's keys with one
// index_select per layer, instead of some ten small ops per row and layer. A sequence holds a
// slot (Acquire/Release, through KvCache); running out of slots or positions reallocates and
// copies, at least doubling, so growth is amortised. Every slot has the same capacity, so one
// long sequence makes every slot long: Trim gives that memory back once it has left. Lives on
// `device`; one thread uses it. Memory running out while it grows or shrinks (Acquire, Reserve,
// Trim throw) leaves it as it was, every cache's contents kept (after a failed Trim, possibly
// at the smaller capacity).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/torch_pch.h"

namespace marlaas::model {

class KvArena {
 public:
  static constexpr int64_t kInitialSlots = 8, kInitialCapacity = 64;
  KvArena(const ModelConfig& config, torch::Device device, int64_t slots = kInitialSlots,
          int64_t capacity = kInitialCapacity);

  // A free slot (the arena grows when none is); its contents are stale until written.
  int64_t Acquire();
  void Release(int64_t slot);
  // Every slot holds at least `capacity` positions afterwards; existing contents are kept.
  void Reserve(int64_t capacity);
  // Every slot keeps its first `capacity` positions (at least one) and the memory for the rest is
  // freed; the caller guarantees that no cache is longer. Nothing happens when the arena is no
  // larger.
  void Trim(int64_t capacity);

  int64_t slots() const { return slots_; }
  int layers() const { return int(k_.size()); }
  int64_t capacity() const { return capacity_; }
  int64_t in_use() const { return slots_ - int64_t(free_.size()); }
  // [slots, kv_heads, capacity, head_dim] of `layer`; valid until the next Acquire, Reserve
  // or Trim.
  const torch::Tensor& keys(int layer) const { return k_[size_t(layer)]; }
  const torch::Tensor& values(int layer) const { return v_[size_t(layer)]; }

 private:
  void Resize(int64_t slots, int64_t capacity);
  std::vector<torch::Tensor> k_, v_;
  std::vector<int64_t> free_;  // a stack: the most recently released slot is reused first
  int64_t slots_ = 0, capacity_ = 0;
};

}  // namespace marlaas::model

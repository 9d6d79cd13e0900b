#include "model/kv_arena.h"

#include <algorithm>

namespace marlaas::model {

KvArena::KvArena(const ModelConfig& c, torch::Device device, int64_t slots, int64_t capacity) {
  TORCH_CHECK(slots >= 1 && capacity >= 1, "a KvArena needs at least one slot and position");
  const auto options = torch::TensorOptions(torch::kFloat32).device(device);
  // Zeroed, and zeroed when grown: a decoding row reads the positions up to the longest row's,
  // masked to weight 0, and 0 times garbage that happens to be inf or NaN (freed memory of a
  // masked -inf score tensor) is NaN.
  for (int l = 0; l < c.num_layers; ++l) {
    k_.push_back(torch::zeros({slots, c.num_kv_heads, capacity, c.head_dim}, options));
    v_.push_back(torch::zeros({slots, c.num_kv_heads, capacity, c.head_dim}, options));
  }
  slots_ = slots;
  capacity_ = capacity;
  for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(s);
}

void KvArena::Resize(int64_t slots, int64_t capacity) {
  const int64_t keep = std::min(capacity, capacity_);
  try {
    for (size_t l = 0; l < k_.size(); ++l) {
      for (torch::Tensor* t : {&k_[l], &v_[l]}) {
        auto resized = torch::zeros({slots, t->size(1), capacity, t->size(3)}, t->options());
        resized.narrow(0, 0, slots_).narrow(2, 0, keep).copy_(t->narrow(2, 0, keep));
        *t = resized;
      }
    }
  } catch (...) {
    // Out of memory part way (a layer's new tensor): the layers resized so far and those not
    // are each narrowed, without a copy, to what both sizes hold, so every layer has the same
    // shape again and every cache its contents (a Trim keeps only positions no cache uses). The
    // arena stays usable; the caller sees the exception.
    const int64_t common_slots = std::min(slots, slots_);
    for (size_t l = 0; l < k_.size(); ++l)
      for (torch::Tensor* t : {&k_[l], &v_[l]})
        *t = t->narrow(0, 0, common_slots).narrow(2, 0, keep);
    capacity_ = keep;
    throw;
  }
  for (int64_t s = slots - 1; s >= slots_; --s) free_.push_back(s);
  slots_ = slots;
  capacity_ = capacity;
}

int64_t KvArena::Acquire() {
  if (free_.empty()) Resize(slots_ * 2, capacity_);
  const int64_t slot = free_.back();
  free_.pop_back();
  return slot;
}

void KvArena::Release(int64_t slot) {
  TORCH_CHECK(slot >= 0 && slot < slots_, "KvArena::Release: no slot ", slot);
  TORCH_CHECK(std::find(free_.begin(), free_.end(), slot) == free_.end(), "KvArena::Release: slot ",
              slot, " is already free");
  free_.push_back(slot);
}

void KvArena::Reserve(int64_t capacity) {
  if (capacity > capacity_) Resize(slots_, std::max(capacity, capacity_ * 2));
}

void KvArena::Trim(int64_t capacity) {
  capacity = std::max<int64_t>(capacity, 1);
  if (capacity < capacity_) Resize(slots_, capacity);
}

}  // namespace marlaas::model

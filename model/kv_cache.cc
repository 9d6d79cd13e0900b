#include "model/kv_cache.h"

#include <utility>

namespace marlaas::model {

KvCache::KvCache(const ModelConfig& c, int64_t initial_capacity, torch::Device device)
    : KvCache(std::make_shared<KvArena>(c, device, 1, initial_capacity)) {}

KvCache::KvCache(std::shared_ptr<KvArena> arena) : arena_(std::move(arena)) {
  TORCH_CHECK(arena_ != nullptr, "a KvCache needs an arena");
  slot_ = arena_->Acquire();
}

KvCache::~KvCache() {
  if (arena_ != nullptr && slot_ >= 0) arena_->Release(slot_);
}

KvCache::KvCache(KvCache&& other) noexcept
    : arena_(std::move(other.arena_)),
      slot_(std::exchange(other.slot_, -1)),
      length_(std::exchange(other.length_, 0)) {}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
  if (this != &other) {
    if (arena_ != nullptr && slot_ >= 0) arena_->Release(slot_);
    arena_ = std::move(other.arena_);
    slot_ = std::exchange(other.slot_, -1);
    length_ = std::exchange(other.length_, 0);
  }
  return *this;
}

void KvCache::Append(int layer, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t t = k.size(1);
  arena_->Reserve(length_ + t);
  arena_->keys(layer).select(0, slot_).narrow(1, length_, t).copy_(k);
  arena_->values(layer).select(0, slot_).narrow(1, length_, t).copy_(v);
}

void KvCache::CopyFrom(const KvCache& other) {
  TORCH_CHECK(other.arena_ == arena_, "KvCache::CopyFrom needs a cache of the same arena");
  const int64_t n = other.length_;
  arena_->Reserve(n);
  for (int l = 0; l < arena_->layers(); ++l) {
    for (const torch::Tensor* t : {&arena_->keys(l), &arena_->values(l)}) {
      t->select(0, slot_).narrow(1, 0, n).copy_(t->select(0, other.slot_).narrow(1, 0, n));
    }
  }
  length_ = n;
}

torch::Tensor KvCache::Keys(int layer, int64_t pending) const {
  return arena_->keys(layer).select(0, slot_).narrow(1, 0, length_ + pending);
}

torch::Tensor KvCache::Values(int layer, int64_t pending) const {
  return arena_->values(layer).select(0, slot_).narrow(1, 0, length_ + pending);
}

}  // namespace marlaas::model

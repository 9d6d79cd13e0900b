// AdapterLayout: the shape of one tenant's LoRA adapter as the adapter store and every stage see
// it. An adapter is one flat buffer: for each layer, for each adapted target module in
// LoraTarget order, A [rank x in_dim] then Bᵀ [rank x out_dim], row-major. One flat buffer is what
// lets a swap be one copy and a cross-GPU update one broadcast. B is stored transposed, Bᵀ
// [rank x out_dim], so the expand step of the multi-LoRA kernels streams contiguous rows (PEFT
// import/export transposes). Plain value type.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace marlaas {

enum class LoraTarget : uint32_t { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;
const char* LoraTargetName(LoraTarget t);  // "q_proj", ..., "down_proj" (Hugging Face names)

struct AdapterLayout {
  uint32_t rank = 0;
  float alpha = 0;
  uint32_t num_layers = 0;
  uint32_t target_mask = 0;  // bit t set: LoraTarget t is adapted in every layer
  uint32_t dtype_bytes = 4;  // 4 (f32) on CPU; 2 (bf16/f16) allowed for GPU buffers
  uint32_t in_dim[kNumLoraTargets] = {};
  uint32_t out_dim[kNumLoraTargets] = {};

  bool has(LoraTarget t) const { return (target_mask >> uint32_t(t)) & 1u; }
  uint64_t NumElements() const;
  uint64_t NumBytes() const { return NumElements() * dtype_bytes; }
  // Element offset of layer `layer`'s A matrix for target t. REQUIRES: has(t).
  uint64_t OffsetOfA(uint32_t layer, LoraTarget t) const;
  uint64_t OffsetOfB(uint32_t layer, LoraTarget t) const {
    return OffsetOfA(layer, t) + uint64_t(rank) * in_dim[uint32_t(t)];
  }
  Status Validate() const;
};

}  // namespace marlaas

#include "shm/adapter_layout.h"

namespace marlaas {

const char* LoraTargetName(LoraTarget t) {
  static const char* const kNames[kNumLoraTargets] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                      "gate_proj", "up_proj", "down_proj"};
  return kNames[uint32_t(t)];
}

namespace {
uint64_t PerLayer(const AdapterLayout& l) {
  uint64_t n = 0;
  for (uint32_t t = 0; t < kNumLoraTargets; ++t) {
    if (l.has(LoraTarget(t))) n += uint64_t(l.rank) * (l.in_dim[t] + l.out_dim[t]);
  }
  return n;
}
}  // namespace

uint64_t AdapterLayout::NumElements() const { return PerLayer(*this) * num_layers; }

uint64_t AdapterLayout::OffsetOfA(uint32_t layer, LoraTarget target) const {
  uint64_t off = PerLayer(*this) * layer;
  for (uint32_t t = 0; t < uint32_t(target); ++t) {
    if (has(LoraTarget(t))) off += uint64_t(rank) * (in_dim[t] + out_dim[t]);
  }
  return off;
}

Status AdapterLayout::Validate() const {
  auto bad = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  if (rank < 1 || rank > 256)
    return bad("adapter rank " + std::to_string(rank) + " not in [1, 256]");
  if (!(alpha > 0)) return bad("adapter alpha must be > 0");
  if (num_layers < 1 || num_layers > 1024) return bad("adapter num_layers not in [1, 1024]");
  if (target_mask == 0 || target_mask >= (1u << kNumLoraTargets)) {
    return bad("adapter target mask " + std::to_string(target_mask) + " names no valid target");
  }
  if (dtype_bytes != 4 && dtype_bytes != 2) return bad("adapter dtype must be 2 or 4 bytes");
  for (uint32_t t = 0; t < kNumLoraTargets; ++t) {
    if (has(LoraTarget(t)) && (in_dim[t] == 0 || out_dim[t] == 0)) {
      return bad(std::string("adapter target ") + LoraTargetName(LoraTarget(t)) +
                 " has a zero dimension");
    }
  }
  return Status::Ok();
}

}  // namespace marlaas

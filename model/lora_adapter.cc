#include "model/lora_adapter.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "base/file_util.h"
#include "model/tensor_io.h"

namespace marlaas::model {
namespace {

using json = nlohmann::json;

std::string PeftKey(int layer, LoraTarget t, const char* which) {
  const bool attn =
      t == LoraTarget::kQ || t == LoraTarget::kK || t == LoraTarget::kV || t == LoraTarget::kO;
  return "base_model.model.model.layers." + std::to_string(layer) +
         (attn ? ".self_attn." : ".mlp.") + LoraTargetName(t) + "." + which + ".weight";
}

// Far above any rank in use; AdapterLayout::Validate applies the layout's own limit after it.
constexpr int64_t kMaxPeftRank = 4096;

Status BadPeft(const std::string& dir, const std::string& m) {
  return Status(StatusCode::kInvalidArgument, dir + ": " + m);
}

}  // namespace

AdapterLayout LayoutFor(const BaseWeights& base, uint32_t rank, float alpha, uint32_t mask) {
  AdapterLayout l;
  l.rank = rank;
  l.alpha = alpha;
  l.num_layers = uint32_t(base.layers.size());
  l.target_mask = mask;
  for (int t = 0; t < kNumLoraTargets; ++t) {
    l.in_dim[t] = uint32_t(base.InDim(LoraTarget(t)));
    l.out_dim[t] = uint32_t(base.OutDim(LoraTarget(t)));
  }
  return l;
}

torch::Tensor LoraAdapter::A(int layer, LoraTarget t) const {
  const int64_t in = layout_.in_dim[int(t)];
  return flat_.narrow(0, int64_t(layout_.OffsetOfA(uint32_t(layer), t)), int64_t(layout_.rank) * in)
      .view({int64_t(layout_.rank), in});
}

torch::Tensor LoraAdapter::BT(int layer, LoraTarget t) const {
  const int64_t out = layout_.out_dim[int(t)];
  return flat_.narrow(0, int64_t(layout_.OffsetOfB(uint32_t(layer), t)), out * layout_.rank)
      .view({int64_t(layout_.rank), out});
}

Result<LoraAdapter> LoraAdapter::Create(const BaseWeights& base, uint32_t rank, float alpha,
                                        uint32_t target_mask, uint64_t seed) {
  LoraAdapter a;
  a.layout_ = LayoutFor(base, rank, alpha, target_mask);
  MARLAAS_RETURN_IF_ERROR(a.layout_.Validate());
  a.flat_ = torch::zeros({int64_t(a.layout_.NumElements())});
  auto gen = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  for (int l = 0; l < int(a.layout_.num_layers); ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!a.has(LoraTarget(t))) continue;
      // kaiming_uniform(a=sqrt(5)) on [rank, in]: bound = 1/sqrt(in).
      const double bound = 1.0 / std::sqrt(double(a.layout_.in_dim[t]));
      a.A(l, LoraTarget(t)).uniform_(-bound, bound, gen);
    }
  }
  return a;
}

Result<LoraAdapter> LoraAdapter::FromFlat(const AdapterLayout& layout, const float* data) {
  MARLAAS_RETURN_IF_ERROR(layout.Validate());
  if (layout.dtype_bytes != 4) return Status(StatusCode::kInvalidArgument, "CPU adapters are f32");
  LoraAdapter a;
  a.layout_ = layout;
  a.flat_ = torch::empty({int64_t(layout.NumElements())});
  std::memcpy(a.flat_.data_ptr<float>(), data, layout.NumBytes());
  return a;
}

Result<LoraAdapter> LoraAdapter::FromFlatTensor(const AdapterLayout& layout, torch::Tensor flat) {
  MARLAAS_RETURN_IF_ERROR(layout.Validate());
  if (layout.dtype_bytes != 4 || flat.scalar_type() != torch::kFloat32) {
    return Status(StatusCode::kInvalidArgument, "adapters are f32");
  }
  if (flat.dim() != 1 || uint64_t(flat.numel()) != layout.NumElements() || !flat.is_contiguous()) {
    return Status(StatusCode::kInvalidArgument,
                  "flat adapter tensor has " + std::to_string(flat.numel()) +
                      " elements (contiguous, 1-D expected), its layout " +
                      std::to_string(layout.NumElements()));
  }
  LoraAdapter a;
  a.layout_ = layout;
  a.flat_ = std::move(flat);
  return a;
}

void LoraAdapter::MoveTo(const torch::Device& device) {
  if (flat_.device() == device) return;
  flat_ = flat_.detach().to(device);
}

Result<LoraAdapter> LoraAdapter::ImportPeft(const std::string& dir, const BaseWeights& base) {
  MARLAAS_ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/adapter_config.json"));
  json cfg = json::parse(text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object())
    return BadPeft(dir, "adapter_config.json is not a JSON object");
  // Every field is type-checked before it is read: a wrong type is an error naming the field.
  auto string_is = [&](const char* key, const char* want) -> Status {
    auto it = cfg.find(key);
    if (it == cfg.end()) return Status::Ok();  // PEFT's default is `want`
    if (!it->is_string() || it->get<std::string>() != want) {
      return BadPeft(dir, std::string("adapter_config.json: '") + key + "' must be \"" + want +
                              "\", not " + it->dump());
    }
    return Status::Ok();
  };
  MARLAAS_RETURN_IF_ERROR(string_is("peft_type", "LORA"));
  auto r = cfg.find("r");
  if (r == cfg.end() || !r->is_number_integer())
    return BadPeft(dir, "adapter_config.json has no integer 'r'");
  // As int64 (an unsigned value above INT64_MAX reads negative), so that nothing truncates.
  const int64_t r64 = r->get<int64_t>();
  if (r64 < 1 || r64 > kMaxPeftRank) {
    return BadPeft(dir, "adapter_config.json: 'r' is " + r->dump() + ", not in [1, " +
                            std::to_string(kMaxPeftRank) + "]");
  }
  const auto rank = uint32_t(r64);
  float alpha = float(rank);
  if (auto a = cfg.find("lora_alpha"); a != cfg.end()) {
    const double v = a->is_number() ? a->get<double>() : 0.0;
    if (!(v > 0) || !std::isfinite(float(v))) {
      return BadPeft(
          dir, "adapter_config.json: 'lora_alpha' must be a positive number, not " + a->dump());
    }
    alpha = float(v);
  }
  // Options that change the math, which we do not implement: refuse rather than compute wrongly.
  for (const char* flag : {"use_rslora", "use_dora", "fan_in_fan_out"}) {
    auto it = cfg.find(flag);
    if (it == cfg.end() || it->is_null()) continue;
    if (!it->is_boolean()) {
      return BadPeft(dir, std::string("adapter_config.json: '") + flag +
                              "' must be true or false, not " + it->dump());
    }
    if (it->get<bool>()) return BadPeft(dir, std::string(flag) + " is not supported");
  }
  for (const char* pattern : {"rank_pattern", "alpha_pattern"}) {
    auto it = cfg.find(pattern);
    if (it == cfg.end() || it->is_null()) continue;
    if (!it->is_object()) {
      return BadPeft(dir, std::string("adapter_config.json: '") + pattern +
                              "' must be an object, not a " + it->type_name());
    }
    if (!it->empty()) return BadPeft(dir, std::string(pattern) + " is not supported");
  }
  if (cfg.contains("layers_to_transform") && !cfg["layers_to_transform"].is_null()) {
    return BadPeft(dir, "layers_to_transform is not supported");
  }
  MARLAAS_RETURN_IF_ERROR(string_is("bias", "none"));
  uint32_t mask = 0;
  if (!cfg.contains("target_modules") || !cfg["target_modules"].is_array()) {
    return BadPeft(dir, "target_modules must be a list of module names");
  }
  for (const auto& m : cfg["target_modules"]) {
    bool known = false;
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (m.is_string() && m.get<std::string>() == LoraTargetName(LoraTarget(t))) {
        mask |= 1u << t;
        known = true;
      }
    }
    if (!known)
      return BadPeft(dir, "target module " + m.dump() + " is not one of q/k/v/o/gate/up/down_proj");
  }
  LoraAdapter a;
  a.layout_ = LayoutFor(base, rank, alpha, mask);
  MARLAAS_RETURN_IF_ERROR(a.layout_.Validate().Annotate(dir));
  MARLAAS_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir + "/adapter_model.safetensors"));
  a.flat_ = torch::zeros({int64_t(a.layout_.NumElements())});
  torch::NoGradGuard no_grad;
  std::set<std::string> read;
  for (int l = 0; l < int(a.layout_.num_layers); ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!a.has(LoraTarget(t))) continue;
      for (const char* which : {"lora_A", "lora_B"}) {
        const std::string key = PeftKey(l, LoraTarget(t), which);
        MARLAAS_ASSIGN_OR_RETURN(TensorView v, file->Get(key));
        MARLAAS_ASSIGN_OR_RETURN(
            torch::Tensor src, ToWeightTensor(v, false, "tensor '" + key + "' in " + file->path()));
        torch::Tensor dst = which[5] == 'A' ? a.A(l, LoraTarget(t)) : a.B(l, LoraTarget(t));
        if (src.sizes() != dst.sizes()) {
          return BadPeft(dir, key + " has shape " + c10::str(src.sizes()) + ", expected " +
                                  c10::str(dst.sizes()));
        }
        // A NaN would reach every completion of the tenant (it used to sample empty answers).
        if (!torch::isfinite(src).all().item<bool>())
          return BadPeft(dir, key + " holds a NaN or infinite value");
        dst.copy_(src);
        read.insert(key);
      }
    }
  }
  // Weights of modules adapter_config.json does not name would be dropped without a word.
  for (const std::string& name : file->names()) {
    if (!read.count(name)) {
      return BadPeft(dir, "adapter_model.safetensors holds '" + name +
                              "', which adapter_config.json's target_modules and the base's "
                              "layers do not account for");
    }
  }
  return a;
}

Status LoraAdapter::ExportPeft(const std::string& dir, const std::string& base_model_name) const {
  json targets = json::array();
  for (int t = 0; t < kNumLoraTargets; ++t) {
    if (has(LoraTarget(t))) targets.push_back(LoraTargetName(LoraTarget(t)));
  }
  json cfg = {{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"base_model_name_or_path", base_model_name},
              {"r", layout_.rank},
              {"lora_alpha", layout_.alpha},
              {"lora_dropout", 0.0},
              {"target_modules", targets},
              {"bias", "none"},
              {"fan_in_fan_out", false},
              {"use_rslora", false},
              {"use_dora", false},
              {"inference_mode", true},
              {"init_lora_weights", true},
              {"modules_to_save", nullptr},
              {"layers_to_transform", nullptr},
              {"rank_pattern", json::object()},
              {"alpha_pattern", json::object()}};
  std::map<std::string, torch::Tensor> tensors;
  for (int l = 0; l < int(layout_.num_layers); ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!has(LoraTarget(t))) continue;
      tensors[PeftKey(l, LoraTarget(t), "lora_A")] = A(l, LoraTarget(t)).detach().cpu();
      tensors[PeftKey(l, LoraTarget(t), "lora_B")] = B(l, LoraTarget(t)).detach().cpu();
    }
  }
  MARLAAS_RETURN_IF_ERROR(
      SaveTensors(dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}}));
  return WriteFileAtomically(dir + "/adapter_config.json", cfg.dump(2) + "\n");
}

}  // namespace marlaas::model

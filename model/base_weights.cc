#include "model/base_weights.h"

#include <nlohmann/json.hpp>
#include <set>

#include "base/file_util.h"
#include "model/tensor_io.h"

namespace marlaas::model {
namespace {

using json = nlohmann::json;

std::string ProjName(int layer, LoraTarget t) {
  const bool attn =
      t == LoraTarget::kQ || t == LoraTarget::kK || t == LoraTarget::kV || t == LoraTarget::kO;
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") +
         LoraTargetName(t);
}

// name -> the file holding it.
class TensorSource {
 public:
  Status Open(const std::string& dir) {
    if (FileExists(dir + "/model.safetensors")) {
      MARLAAS_ASSIGN_OR_RETURN(auto single, SafetensorsFile::Open(dir + "/model.safetensors"));
      files_.push_back(single);
      for (const auto& n : single->names()) where_[n] = single.get();
      return Status::Ok();
    }
    const std::string index_path = dir + "/model.safetensors.index.json";
    auto text = ReadFile(index_path);
    if (!text.ok()) {
      return Status(StatusCode::kNotFound,
                    dir + " has neither model.safetensors nor model.safetensors.index.json");
    }
    json index = json::parse(*text, nullptr, false);
    if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      return Status(StatusCode::kCorrupt, index_path + ": no weight_map object");
    }
    std::map<std::string, const SafetensorsFile*> by_file;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string())
        return Status(StatusCode::kCorrupt, index_path + ": bad weight_map entry");
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos) {
        return Status(StatusCode::kCorrupt,
                      index_path + ": shard name '" + shard + "' leaves the model folder");
      }
      if (!by_file.count(shard)) {
        MARLAAS_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(dir + "/" + shard));
        files_.push_back(f);
        by_file[shard] = f.get();
      }
      if (!by_file[shard]->contains(it.key())) {
        return Status(StatusCode::kCorrupt, index_path + ": '" + it.key() + "' is not in " + shard);
      }
      where_[it.key()] = by_file[shard];
    }
    return Status::Ok();
  }

  // The tensor as f32, checked: it is there, has `shape` and a floating-point dtype.
  Result<torch::Tensor> Get(const std::string& name, std::vector<int64_t> shape) const {
    MARLAAS_ASSIGN_OR_RETURN(TensorView v, View(name, std::move(shape)));
    return ToWeightTensor(v, /*allow_zero_copy=*/true, What(name));
  }
  // The same checks, without the conversion.
  Status Check(const std::string& name, std::vector<int64_t> shape) const {
    MARLAAS_ASSIGN_OR_RETURN(TensorView v, View(name, std::move(shape)));
    return CheckWeightDType(v, What(name));
  }
  bool Has(const std::string& name) const { return where_.count(name) != 0; }
  // After a lookup of every tensor the config asks for: a layer tensor it did not ask for means
  // config.json describes another model (fewer layers, no q/k/v biases), which would run on part
  // of the weights. Other leftovers are left (an untied lm_head beside tied embeddings, rotary
  // inv_freq buffers of older checkpoints).
  Status CheckNoLayerLeftOver(const ModelConfig& c) const {
    for (const auto& [name, file] : where_) {
      if (used_.count(name) || name.rfind("model.layers.", 0) != 0) continue;
      if (name.size() >= 9 && name.compare(name.size() - 9, 9, ".inv_freq") == 0) continue;
      return Status(StatusCode::kInvalidArgument,
                    "tensor '" + name + "' in " + file->path() +
                        " is not part of the model config.json describes (model_type " +
                        c.model_type + ", num_hidden_layers " + std::to_string(c.num_layers) +
                        "): config.json does not match the weights");
    }
    return Status::Ok();
  }
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;

 private:
  std::string What(const std::string& name) const {
    return "tensor '" + name + "' in " + where_.at(name)->path();
  }
  Result<TensorView> View(const std::string& name, std::vector<int64_t> shape) const {
    auto it = where_.find(name);
    if (it == where_.end())
      return Status(StatusCode::kNotFound, "checkpoint has no tensor '" + name + "'");
    used_.insert(name);
    MARLAAS_ASSIGN_OR_RETURN(TensorView v, it->second->Get(name));
    if (v.shape != shape) {
      std::string want, got;
      for (auto d : shape) want += (want.empty() ? "" : ",") + std::to_string(d);
      for (auto d : v.shape) got += (got.empty() ? "" : ",") + std::to_string(d);
      return Status(StatusCode::kInvalidArgument, "tensor '" + name + "' has shape [" + got +
                                                      "], config.json implies [" + want + "]");
    }
    return v;
  }

  std::map<std::string, const SafetensorsFile*> where_;
  mutable std::set<std::string> used_;  // names looked up
};

}  // namespace

int64_t BaseWeights::InDim(LoraTarget t) const { return layers[0].proj[size_t(t)].size(1); }
int64_t BaseWeights::OutDim(LoraTarget t) const { return layers[0].proj[size_t(t)].size(0); }

Result<std::shared_ptr<BaseWeights>> BaseWeights::FromLookup(const ModelConfig& c,
                                                             const Lookup& get) {
  auto w = std::make_shared<BaseWeights>();
  w->config = c;
  const int64_t h = c.hidden_size, q = int64_t(c.num_heads) * c.head_dim,
                kv = int64_t(c.num_kv_heads) * c.head_dim, ff = c.intermediate_size;
  MARLAAS_ASSIGN_OR_RETURN(w->embed, get("model.embed_tokens.weight", {c.vocab_size, h}));
  MARLAAS_ASSIGN_OR_RETURN(w->final_norm, get("model.norm.weight", {h}));
  if (c.tie_word_embeddings) {
    w->lm_head = w->embed;
  } else {
    MARLAAS_ASSIGN_OR_RETURN(w->lm_head, get("lm_head.weight", {c.vocab_size, h}));
  }
  const std::vector<int64_t> shapes[kNumLoraTargets] = {{q, h},  {kv, h}, {kv, h}, {h, q},
                                                        {ff, h}, {ff, h}, {h, ff}};
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights L;
    const std::string p = "model.layers." + std::to_string(i);
    MARLAAS_ASSIGN_OR_RETURN(L.input_norm, get(p + ".input_layernorm.weight", {h}));
    MARLAAS_ASSIGN_OR_RETURN(L.post_norm, get(p + ".post_attention_layernorm.weight", {h}));
    for (int t = 0; t < kNumLoraTargets; ++t) {
      MARLAAS_ASSIGN_OR_RETURN(L.proj[size_t(t)],
                               get(ProjName(i, LoraTarget(t)) + ".weight", shapes[t]));
    }
    if (c.qkv_bias) {
      MARLAAS_ASSIGN_OR_RETURN(L.q_bias, get(p + ".self_attn.q_proj.bias", {q}));
      MARLAAS_ASSIGN_OR_RETURN(L.k_bias, get(p + ".self_attn.k_proj.bias", {kv}));
      MARLAAS_ASSIGN_OR_RETURN(L.v_bias, get(p + ".self_attn.v_proj.bias", {kv}));
    }
    w->layers.push_back(std::move(L));
  }
  return w;
}

Result<std::shared_ptr<const BaseWeights>> BaseWeights::Load(const std::string& dir) {
  MARLAAS_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::Load(dir));
  TensorSource src;
  MARLAAS_RETURN_IF_ERROR(src.Open(dir));
  MARLAAS_ASSIGN_OR_RETURN(
      std::shared_ptr<BaseWeights> w,
      FromLookup(config, [&](const std::string& name, std::vector<int64_t> shape) {
        return src.Get(name, std::move(shape));
      }));
  MARLAAS_RETURN_IF_ERROR(src.CheckNoLayerLeftOver(config));
  w->files = std::move(src.files_);
  return std::shared_ptr<const BaseWeights>(std::move(w));
}

Status BaseWeights::Check(const std::string& dir) {
  MARLAAS_ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::Load(dir));
  TensorSource src;
  MARLAAS_RETURN_IF_ERROR(src.Open(dir));
  MARLAAS_RETURN_IF_ERROR(
      FromLookup(config,
                 [&](const std::string& name, std::vector<int64_t> shape) -> Result<torch::Tensor> {
                   MARLAAS_RETURN_IF_ERROR(src.Check(name, std::move(shape)));
                   return torch::Tensor();  // FromLookup only stores what it gets
                 })
          .status());
  return src.CheckNoLayerLeftOver(config);
}

std::shared_ptr<BaseWeights> BaseWeights::Random(const ModelConfig& c, uint64_t seed,
                                                 float init_std) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto normal = [&](std::vector<int64_t> shape) {
    return torch::empty(shape).normal_(0, init_std, gen);
  };
  auto w = std::make_shared<BaseWeights>();
  w->config = c;
  const int64_t h = c.hidden_size, q = int64_t(c.num_heads) * c.head_dim,
                kv = int64_t(c.num_kv_heads) * c.head_dim, ff = c.intermediate_size;
  w->embed = normal({c.vocab_size, h});
  w->final_norm = torch::ones({h});
  w->lm_head = c.tie_word_embeddings ? w->embed : normal({c.vocab_size, h});
  const std::vector<int64_t> shapes[kNumLoraTargets] = {{q, h},  {kv, h}, {kv, h}, {h, q},
                                                        {ff, h}, {ff, h}, {h, ff}};
  for (int i = 0; i < c.num_layers; ++i) {
    LayerWeights L;
    L.input_norm = torch::ones({h});
    L.post_norm = torch::ones({h});
    for (int t = 0; t < kNumLoraTargets; ++t) L.proj[size_t(t)] = normal(shapes[t]);
    if (c.qkv_bias) {
      L.q_bias = torch::zeros({q});
      L.k_bias = torch::zeros({kv});
      L.v_bias = torch::zeros({kv});
    }
    w->layers.push_back(std::move(L));
  }
  return w;
}

std::map<std::string, torch::Tensor> BaseWeights::NamedTensors() const {
  std::map<std::string, torch::Tensor> out;
  out["model.embed_tokens.weight"] = embed;
  out["model.norm.weight"] = final_norm;
  if (!config.tie_word_embeddings) out["lm_head.weight"] = lm_head;
  for (int i = 0; i < int(layers.size()); ++i) {
    const LayerWeights& L = layers[size_t(i)];
    const std::string p = "model.layers." + std::to_string(i);
    out[p + ".input_layernorm.weight"] = L.input_norm;
    out[p + ".post_attention_layernorm.weight"] = L.post_norm;
    for (int t = 0; t < kNumLoraTargets; ++t)
      out[ProjName(i, LoraTarget(t)) + ".weight"] = L.proj[size_t(t)];
    if (config.qkv_bias) {
      out[p + ".self_attn.q_proj.bias"] = L.q_bias;
      out[p + ".self_attn.k_proj.bias"] = L.k_bias;
      out[p + ".self_attn.v_proj.bias"] = L.v_bias;
    }
  }
  return out;
}

}  // namespace marlaas::model

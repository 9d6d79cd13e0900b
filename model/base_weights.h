// BaseWeights: the frozen base model, loaded from a Hugging Face checkpoint directory
// (config.json plus model.safetensors, or shards listed in model.safetensors.index.json; f32,
// bf16, f16 or f64 on disk; an integer or bool weight is refused naming the tensor and file) by
// memory-mapping the files. f32 weights point into the read-only mappings, so processes loading
// the same model share its pages. Immutable after Load; any thread may read it. No tensor here
// ever requires grad.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/torch_pch.h"
#include "shm/adapter_layout.h"

namespace marlaas::model {

struct LayerWeights {
  torch::Tensor input_norm;  // [hidden]
  torch::Tensor post_norm;   // [hidden]
  // Indexed by LoraTarget: q, k, v, o, gate, up, down; each [out, in] as in nn.Linear.
  std::array<torch::Tensor, kNumLoraTargets> proj;
  torch::Tensor q_bias, k_bias, v_bias;  // undefined unless config.qkv_bias
};

struct BaseWeights {
  ModelConfig config;
  torch::Tensor embed;       // [vocab, hidden]
  torch::Tensor final_norm;  // [hidden]
  torch::Tensor lm_head;     // [vocab, hidden]; the embedding when tied
  std::vector<LayerWeights> layers;
  std::vector<std::shared_ptr<const SafetensorsFile>> files;  // keep the mappings alive
  std::shared_ptr<const void> storage;  // keeps a block the tensors view alive (packed weights)

  static Result<std::shared_ptr<const BaseWeights>> Load(const std::string& model_dir);
  // What Load would refuse, found without converting a weight (only the files' headers are
  // read): config.json, the files, and each tensor's presence, shape and dtype.
  static Status Check(const std::string& model_dir);
  // The tensor named `name` (Hugging Face names, as NamedTensors gives them), which must have
  // `shape`; an error names the tensor.
  using Lookup =
      std::function<Result<torch::Tensor>(const std::string& name, std::vector<int64_t> shape)>;
  // Weights of `config` built from a lookup: what Load (checkpoint files) and the packed views
  // (model/packed_weights.h) share.
  static Result<std::shared_ptr<BaseWeights>> FromLookup(const ModelConfig& config,
                                                         const Lookup& get);
  // Fresh weights: projections and embeddings ~ N(0, init_std), norms = 1, biases = 0.
  // Deterministic for a seed. For benchmarks, tests and the start of pretraining.
  static std::shared_ptr<BaseWeights> Random(const ModelConfig& config, uint64_t seed,
                                             float init_std = 0.02f);
  // Input and output width of projection `t` (what a LoRA on it must match).
  int64_t InDim(LoraTarget t) const;
  int64_t OutDim(LoraTarget t) const;
  // The tensors by their Hugging Face names (for writing a checkpoint).
  std::map<std::string, torch::Tensor> NamedTensors() const;
};

}  // namespace marlaas::model

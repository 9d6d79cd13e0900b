// ModelConfig: the shape of a Llama-family decoder, read from a Hugging Face config.json
// (model_type "llama" or "qwen2") and written back in the same layout. Plain value type.
#pragma once

#include <string>

#include "base/status.h"

namespace marlaas::model {

struct ModelConfig {
  std::string model_type = "llama";  // "llama" | "qwen2"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // hidden_size / num_heads unless the file says otherwise
  int max_position_embeddings = 2048;
  float rms_norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2 (and Llama's attention_bias)
  int bos_token_id = -1;
  int eos_token_id = -1;

  // Parses config.json text; unknown model types and missing or inconsistent sizes are errors.
  static Result<ModelConfig> FromJson(const std::string& text);
  static Result<ModelConfig> Load(const std::string& model_dir);
  std::string ToJson() const;
  Status Validate() const;
};

}  // namespace marlaas::model

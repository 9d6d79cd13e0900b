#include "model/config.h"

#include <nlohmann/json.hpp>

#include "base/file_util.h"

namespace marlaas::model {
namespace {

using json = nlohmann::json;

Status Bad(const std::string& m) {
  return Status(StatusCode::kInvalidArgument, "config.json: " + m);
}

// Reads an integer field; `required` ones must be present.
Status GetInt(const json& j, const char* key, bool required, int* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return required ? Bad(std::string("missing '") + key + "'") : Status::Ok();
  }
  if (!it->is_number_integer()) return Bad(std::string("'") + key + "' is not an integer");
  *out = it->get<int>();
  return Status::Ok();
}

Status GetFloat(const json& j, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number()) return Bad(std::string("'") + key + "' is not a number");
  *out = it->get<float>();
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> ModelConfig::FromJson(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  ModelConfig c;
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) return Bad("missing 'model_type'");
  c.model_type = mt->get<std::string>();
  if (c.model_type != "llama" && c.model_type != "qwen2") {
    return Bad("model_type '" + c.model_type + "' is not supported (llama, qwen2)");
  }
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "vocab_size", true, &c.vocab_size));
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "hidden_size", true, &c.hidden_size));
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "intermediate_size", true, &c.intermediate_size));
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", true, &c.num_layers));
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "num_attention_heads", true, &c.num_heads));
  c.num_kv_heads = c.num_heads;
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "num_key_value_heads", false, &c.num_kv_heads));
  c.head_dim = c.num_heads > 0 ? c.hidden_size / c.num_heads : 0;
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "head_dim", false, &c.head_dim));
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "max_position_embeddings", false, &c.max_position_embeddings));
  MARLAAS_RETURN_IF_ERROR(GetFloat(j, "rms_norm_eps", &c.rms_norm_eps));
  // transformers < 5 writes rope_theta at the top level; 5.x nests it in rope_parameters.
  MARLAAS_RETURN_IF_ERROR(GetFloat(j, "rope_theta", &c.rope_theta));
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    MARLAAS_RETURN_IF_ERROR(GetFloat(*rp, "rope_theta", &c.rope_theta));
    auto type = rp->find("rope_type");
    if (type != rp->end() && type->is_string() && type->get<std::string>() != "default") {
      return Bad("rope_type '" + type->get<std::string>() + "' is not supported (default)");
    }
  }
  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    return Bad("rope_scaling is not supported");
  }
  // Both families' MLP is SwiGLU: another activation would be run as SiLU without a word.
  if (auto act = j.find("hidden_act"); act != j.end()) {
    if (!act->is_string() || act->get<std::string>() != "silu")
      return Bad("hidden_act " + act->dump() + " is not supported (\"silu\")");
  }
  if (auto t = j.find("tie_word_embeddings"); t != j.end() && t->is_boolean()) {
    c.tie_word_embeddings = t->get<bool>();
  }
  c.qkv_bias = c.model_type == "qwen2";
  if (auto b = j.find("attention_bias"); b != j.end() && b->is_boolean())
    c.qkv_bias = b->get<bool>();
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "bos_token_id", false, &c.bos_token_id));
  MARLAAS_RETURN_IF_ERROR(GetInt(j, "eos_token_id", false, &c.eos_token_id));
  MARLAAS_RETURN_IF_ERROR(c.Validate());
  return c;
}

Status ModelConfig::Validate() const {
  if (vocab_size < 1 || hidden_size < 1 || intermediate_size < 1 || num_layers < 1 ||
      num_heads < 1 || num_kv_heads < 1 || head_dim < 2) {
    return Bad("sizes must be positive");
  }
  if (num_heads % num_kv_heads != 0) {
    return Bad("num_attention_heads (" + std::to_string(num_heads) +
               ") is not a multiple of num_key_value_heads (" + std::to_string(num_kv_heads) + ")");
  }
  if (head_dim % 2 != 0) return Bad("head_dim must be even for RoPE");
  if (!(rms_norm_eps > 0) || !(rope_theta > 0))
    return Bad("rms_norm_eps and rope_theta must be > 0");
  if (max_position_embeddings < 1) return Bad("max_position_embeddings must be positive");
  for (const auto& [name, id] : {std::pair<const char*, int>{"bos_token_id", bos_token_id},
                                 std::pair<const char*, int>{"eos_token_id", eos_token_id}}) {
    if (id < -1 || id >= vocab_size) {
      return Bad(std::string(name) + " " + std::to_string(id) + " is not a token of the " +
                 std::to_string(vocab_size) + "-token vocabulary");
    }
  }
  return Status::Ok();
}

Result<ModelConfig> ModelConfig::Load(const std::string& model_dir) {
  MARLAAS_ASSIGN_OR_RETURN(std::string text, ReadFile(model_dir + "/config.json"));
  auto c = FromJson(text);
  if (!c.ok()) return c.status().Annotate(model_dir);
  return c;
}

std::string ModelConfig::ToJson() const {
  json j = {
      {"architectures", {model_type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", model_type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_layers},
      {"num_attention_heads", num_heads},
      {"num_key_value_heads", num_kv_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"tie_word_embeddings", tie_word_embeddings},
      {"attention_bias", qkv_bias},
      {"hidden_act", "silu"},
      {"torch_dtype", "float32"},
  };
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  return j.dump(2) + "\n";
}

}  // namespace marlaas::model

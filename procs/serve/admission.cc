#include "procs/serve/admission.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/file_util.h"
#include "base/host_memory.h"

namespace marlaas::serve {

Result<uint64_t> EstimateTenantBytes(const pb::JobSpec& spec, const std::string& model_dir) {
  MARLAAS_ASSIGN_OR_RETURN(std::string text, ReadFile(model_dir + "/config.json"));
  const auto c = nlohmann::json::parse(text, nullptr, false);
  if (!c.is_object()) return Status(StatusCode::kCorrupt, model_dir + "/config.json is not JSON");
  auto field = [&](const char* name, uint64_t fallback) -> Result<uint64_t> {
    if (c.contains(name) && c[name].is_number_unsigned()) return c[name].get<uint64_t>();
    if (fallback > 0) return fallback;
    return Status(StatusCode::kInvalidArgument,
                  model_dir + "/config.json has no positive integer '" + name + "'");
  };
  MARLAAS_ASSIGN_OR_RETURN(const uint64_t hidden, field("hidden_size", 0));
  MARLAAS_ASSIGN_OR_RETURN(const uint64_t inter, field("intermediate_size", 0));
  MARLAAS_ASSIGN_OR_RETURN(const uint64_t layers, field("num_hidden_layers", 0));
  MARLAAS_ASSIGN_OR_RETURN(const uint64_t heads, field("num_attention_heads", 0));
  MARLAAS_ASSIGN_OR_RETURN(const uint64_t kv_heads, field("num_key_value_heads", heads));
  MARLAAS_ASSIGN_OR_RETURN(const uint64_t head_dim, field("head_dim", hidden / heads));
  const uint64_t q = heads * head_dim, kv = kv_heads * head_dim, r = spec.lora().rank();
  uint64_t per_layer = 0;
  std::vector<std::string> targets(spec.lora().targets().begin(), spec.lora().targets().end());
  if (targets.empty())  // the job spec's default: every projection
    targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  for (const std::string& t : targets) {
    uint64_t in = hidden, out = hidden;
    if (t == "q_proj") out = q;
    if (t == "k_proj" || t == "v_proj") out = kv;
    if (t == "o_proj") in = q;
    if (t == "gate_proj" || t == "up_proj") out = inter;
    if (t == "down_proj") in = inter;
    per_layer += r * (in + out);
  }
  const uint64_t params = layers * per_layer;
  const uint64_t positions = kPromptAllowance + spec.sampling().max_new_tokens();
  const uint64_t step_sequences = uint64_t(spec.prompts_per_step()) * spec.group_size();
  const uint64_t rollout_rows = (uint64_t(spec.max_staleness()) + 1) * step_sequences;
  const uint64_t kv_cache = rollout_rows * positions * layers * 2 * kv * 4;
  const uint64_t activations = step_sequences * positions * layers * (12 * hidden + 3 * inter) * 4;
  return 28 * params + kv_cache + activations;
}

Status CheckFitsBasePositions(const pb::JobSpec& spec, const std::string& model_dir) {
  MARLAAS_ASSIGN_OR_RETURN(std::string text, ReadFile(model_dir + "/config.json"));
  const auto c = nlohmann::json::parse(text, nullptr, false);
  if (!c.is_object()) return Status(StatusCode::kCorrupt, model_dir + "/config.json is not JSON");
  uint64_t positions = 2048;  // model::ModelConfig's default when config.json has none
  if (c.contains("max_position_embeddings") && c["max_position_embeddings"].is_number_unsigned())
    positions = c["max_position_embeddings"].get<uint64_t>();
  if (spec.sampling().max_new_tokens() >= positions) {
    return Status(StatusCode::kInvalidArgument,
                  "sampling.max_new_tokens " + std::to_string(spec.sampling().max_new_tokens()) +
                      " leaves no room for a prompt in the base model's " +
                      std::to_string(positions) + " positions (max_position_embeddings)");
  }
  return Status::Ok();
}

namespace {

// The bytes per element of the first tensor in a safetensors file (0: unreadable).
int SafetensorsElementBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char len[8];
  if (!f.read(reinterpret_cast<char*>(len), 8)) return 0;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n == 0 || n > (64u << 20)) return 0;
  std::string header(n, '\0');
  if (!f.read(header.data(), std::streamsize(n))) return 0;
  const auto j = nlohmann::json::parse(header, nullptr, false);
  if (!j.is_object()) return 0;
  for (const auto& [name, t] : j.items()) {
    if (name == "__metadata__" || !t.is_object() || !t.contains("dtype")) continue;
    const std::string dtype = t["dtype"].is_string() ? t["dtype"].get<std::string>() : "";
    return dtype == "F32" ? 4 : dtype == "BF16" || dtype == "F16" ? 2 : 0;
  }
  return 0;
}

}  // namespace

MemoryBudget DefaultMemoryBudget(const std::string& model_dir, int host_model_copies) {
  const HostMemory host = UsableHostMemory();
  if (host.bytes == 0) return {0, "this host's memory is unknown: no budget"};
  uint64_t weights = 0;  // as the model processes hold them: f32
  bool mapped = true;    // f32 files are mapped and shared by every process that loads them
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(model_dir, ec)) {
    if (e.path().extension() != ".safetensors") continue;
    const uintmax_t size = e.file_size(ec);
    if (ec) continue;
    const int element = SafetensorsElementBytes(e.path().string());
    mapped = mapped && element == 4;
    weights += element == 2 ? 2 * uint64_t(size) : uint64_t(size);  // 16-bit: converted to f32
  }
  const int copies = std::max(0, host_model_copies);
  const uint64_t held = mapped ? (copies > 0 ? weights : 0) : weights * uint64_t(copies);
  auto mib = [](uint64_t b) { return std::to_string(b >> 20); };
  std::string source =
      "the default: this host's " + mib(host.bytes) + " MiB (" + host.limited_by + ")";
  if (held > 0) {
    source +=
        " less the base model's " + mib(weights) + " MiB as f32, " +
        (mapped ? std::string("mapped once for its ") + std::to_string(copies) + " model processes"
                : "in each of " + std::to_string(copies) + " model processes");
  }
  source += "; --memory-budget-mb sets another";
  return {held < host.bytes ? host.bytes - held : 1, source};
}

}  // namespace marlaas::serve

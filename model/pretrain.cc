#include "model/pretrain.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "base/file_util.h"
#include "model/base_weights.h"
#include "model/tensor_io.h"
#include "model/tokenizer.h"
#include "model/transformer.h"

namespace marlaas::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

uint64_t Fnv1a(const std::string& s, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// Identifies what a checkpoint was trained from: a different seed, shape, schedule or corpus
// gives a different fingerprint, so a cached folder is reused only when it is the same thing.
std::string Fingerprint(const PretrainOptions& o, const std::vector<std::string>& corpus) {
  uint64_t h = Fnv1a(o.config.ToJson());
  if (!o.answer_marker.empty()) h = Fnv1a(o.answer_marker, h ^ 0xa5);
  for (const std::string& doc : corpus) h = Fnv1a(doc, h ^ 0x9e37);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "v1-seed%llu-steps%d-b%d-l%d-lr%g-w%d%s-%016llx",
                (unsigned long long)o.seed, o.steps, o.batch, o.seq_len, double(o.learning_rate),
                o.warmup_steps, o.align_to_documents ? "-aligned" : "", (unsigned long long)h);
  if (!o.answer_marker.empty()) {
    std::snprintf(buf + std::strlen(buf), sizeof(buf) - std::strlen(buf), "-pw%g",
                  double(o.prompt_loss_weight));
  }
  return buf;
}

double LearningRate(const PretrainOptions& o, int step) {
  if (step < o.warmup_steps) return o.learning_rate * double(step + 1) / o.warmup_steps;
  const double progress = double(step - o.warmup_steps) / std::max(1, o.steps - o.warmup_steps);
  return o.learning_rate * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * progress)));
}

}  // namespace

const std::vector<std::string>& TinySpecialTokens() {
  static const std::vector<std::string> kSpecials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                                     "<tool>",        "</tool>",      "<result>",
                                                     "</result>",     "<|pad|>"};
  return kSpecials;
}

ModelConfig TinyConfig() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 256 + int(TinySpecialTokens().size());
  c.hidden_size = 128;
  c.intermediate_size = 352;
  c.num_layers = 4;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 512;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = true;
  c.bos_token_id = -1;
  c.eos_token_id = 256;
  return c;
}

Result<PretrainReport> Pretrain(const PretrainOptions& o, const std::vector<std::string>& corpus) {
  MARLAAS_RETURN_IF_ERROR(o.config.Validate());
  if (o.steps < 1 || o.batch < 1 || o.seq_len < 2) {
    return Status(StatusCode::kInvalidArgument,
                  "pretrain needs steps, batch >= 1 and seq_len >= 2");
  }
  // out_dir is replaced at the end: it may only be missing, empty, or an earlier pretrain's.
  {
    std::error_code ec;
    const fs::file_status st = fs::status(o.out_dir, ec);  // a link to a folder is a folder
    if (fs::exists(st)) {
      if (!fs::is_directory(st)) {
        return Status(StatusCode::kInvalidArgument,
                      o.out_dir + " is a file, not a model folder: refusing to replace it");
      }
      if (!fs::is_empty(o.out_dir, ec) && !FileExists(o.out_dir + "/marlaas_pretrain.json")) {
        return Status(StatusCode::kInvalidArgument,
                      o.out_dir +
                          " holds other files and no earlier pretrain's marlaas_pretrain.json: "
                          "refusing to replace it (give a new or empty folder)");
      }
    }
  }
  const std::string fingerprint = Fingerprint(o, corpus);
  PretrainReport report;
  if (auto meta = ReadFile(o.out_dir + "/marlaas_pretrain.json"); meta.ok()) {
    json m = json::parse(*meta, nullptr, false);
    if (!m.is_discarded() && m.value("fingerprint", "") == fingerprint &&
        FileExists(o.out_dir + "/model.safetensors") && FileExists(o.out_dir + "/config.json")) {
      report.cached = true;
      report.first_loss = m.value("first_loss", 0.0f);
      report.final_loss = m.value("final_loss", 0.0f);
      return report;
    }
  }
  const std::string tokenizer_json = Tokenizer::ByteLevelJson(TinySpecialTokens());
  MARLAAS_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::FromJson(tokenizer_json));
  const int32_t eot = *tok.TokenId("<|endoftext|>");
  std::vector<int64_t> stream;
  std::vector<int64_t> doc_starts;  // where each document begins in the stream
  std::vector<float> weight;        // loss weight of predicting stream[i]
  for (const std::string& doc : corpus) {
    doc_starts.push_back(int64_t(stream.size()));
    size_t prompt_tokens = 0;
    if (!o.answer_marker.empty()) {
      const size_t at = doc.find(o.answer_marker);
      if (at != std::string::npos)
        prompt_tokens = tok.Encode(doc.substr(0, at + o.answer_marker.size())).size();
    }
    const std::vector<int32_t> ids = tok.Encode(doc);
    for (size_t i = 0; i < ids.size(); ++i) {
      stream.push_back(ids[i]);
      weight.push_back(i < prompt_tokens ? o.prompt_loss_weight : 1.0f);
    }
    stream.push_back(eot);
    weight.push_back(1.0f);
  }
  if (int64_t(stream.size()) < o.seq_len + 2) {
    return Status(StatusCode::kInvalidArgument, "pretraining corpus is shorter than one sequence");
  }
  if (tok.vocab_size() > o.config.vocab_size) {
    return Status(StatusCode::kInvalidArgument,
                  "config vocab_size is smaller than the tokenizer's");
  }
  torch::manual_seed(o.seed);
  auto weights = BaseWeights::Random(o.config, o.seed, 0.02f);
  std::vector<torch::Tensor> params;
  for (auto& [name, t] : weights->NamedTensors()) {
    t.set_requires_grad(true);
    params.push_back(t);
  }
  Transformer model(weights);
  torch::optim::AdamW opt(
      params, torch::optim::AdamWOptions(o.learning_rate).betas({0.9, 0.95}).weight_decay(0.01));
  std::mt19937_64 rng(o.seed ^ 0xda7a5eedULL);
  const int64_t last_start = int64_t(stream.size()) - o.seq_len - 1;
  while (!doc_starts.empty() && doc_starts.back() > last_start) doc_starts.pop_back();
  const bool aligned = o.align_to_documents && !doc_starts.empty();
  std::uniform_int_distribution<int64_t> start(0, last_start);
  std::uniform_int_distribution<size_t> start_doc(0, aligned ? doc_starts.size() - 1 : 0);
  auto stream_t = torch::tensor(stream, torch::kInt64);
  auto weight_t = torch::tensor(weight, torch::kFloat32);
  const bool weighted = !o.answer_marker.empty();
  const auto t0 = std::chrono::steady_clock::now();
  double loss_first = 0, loss_last = 0;
  const int window = std::min(20, o.steps);
  for (int step = 0; step < o.steps; ++step) {
    std::vector<torch::Tensor> xs, ys, ws;
    for (int b = 0; b < o.batch; ++b) {
      const int64_t s = aligned ? doc_starts[start_doc(rng)] : start(rng);
      xs.push_back(stream_t.narrow(0, s, o.seq_len));
      ys.push_back(stream_t.narrow(0, s + 1, o.seq_len));
      if (weighted) ws.push_back(weight_t.narrow(0, s + 1, o.seq_len));
    }
    auto x = torch::stack(xs), y = torch::stack(ys);
    for (auto& group : opt.param_groups()) {
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(LearningRate(o, step));
    }
    opt.zero_grad();
    auto logits = model.Forward(x);
    torch::Tensor loss;
    if (weighted) {
      auto w = torch::stack(ws).view({-1});
      auto per_token = torch::nn::functional::cross_entropy(
          logits.view({-1, logits.size(-1)}), y.view({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      loss = (per_token * w).sum() / w.sum().clamp_min(1e-6);
    } else {
      loss = torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), y.view({-1}));
    }
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    opt.step();
    const float l = loss.item<float>();
    if (step < window) loss_first += l / window;
    if (step >= o.steps - window) loss_last += l / window;
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.on_progress && (step % 5 == 4 || step + 1 == o.steps)) {
      o.on_progress({step + 1, o.steps, l, double(step + 1) * o.batch * o.seq_len / secs});
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  report.tokens_per_s = double(o.steps) * o.batch * o.seq_len / report.seconds;
  report.first_loss = float(loss_first);
  report.final_loss = float(loss_last);

  // Write everything into a fresh folder beside out_dir, then move it into place.
  const std::string tmp = o.out_dir + ".tmp." + std::to_string(getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status(StatusCode::kIo, "cannot create " + tmp + ": " + ec.message());
  std::map<std::string, torch::Tensor> tensors;
  for (auto& [name, t] : weights->NamedTensors()) tensors[name] = t.detach();
  MARLAAS_RETURN_IF_ERROR(SaveTensors(tmp + "/model.safetensors", tensors, {{"format", "pt"}}));
  MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(tmp + "/config.json", o.config.ToJson()));
  MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(tmp + "/tokenizer.json", tokenizer_json));
  json meta = {{"fingerprint", fingerprint},
               {"seed", o.seed},
               {"steps", o.steps},
               {"first_loss", report.first_loss},
               {"final_loss", report.final_loss},
               {"seconds", report.seconds},
               {"tokens_per_s", report.tokens_per_s},
               {"documents", corpus.size()},
               {"tokens", stream.size()}};
  MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(tmp + "/marlaas_pretrain.json", meta.dump(2) + "\n"));
  fs::remove_all(o.out_dir, ec);
  fs::create_directories(fs::path(o.out_dir).parent_path(), ec);
  fs::rename(tmp, o.out_dir, ec);
  if (ec)
    return Status(StatusCode::kIo, "cannot move " + tmp + " to " + o.out_dir + ": " + ec.message());
  return report;
}

}  // namespace marlaas::model

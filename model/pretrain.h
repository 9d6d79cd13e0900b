// Pretraining the built-in tiny base: a Llama-architecture model over the byte vocabulary,
// trained from scratch (all weights, AdamW, warmup + cosine) on a text corpus, then written in
// Hugging Face layout (config.json, model.safetensors, tokenizer.json) so everything else loads
// it like any checkpoint. Deterministic for a seed on one compute thread. Single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/config.h"

namespace marlaas::model {

// The special tokens of the byte vocabulary, ids 256.. in this order.
const std::vector<std::string>& TinySpecialTokens();
// The default tiny shape: 4 layers, hidden 128, 4 heads (2 KV), ~0.8 M parameters.
ModelConfig TinyConfig();

struct PretrainProgress {
  int step, steps;
  float loss;
  double tokens_per_s;
};

struct PretrainOptions {
  std::string out_dir;
  uint64_t seed = 0;
  ModelConfig config = TinyConfig();
  int steps = 600;
  int batch = 32;
  int seq_len = 64;
  float learning_rate = 3e-3f;
  int warmup_steps = 40;
  std::function<void(const PretrainProgress&)> on_progress;  // every few steps
};

struct PretrainReport {
  float first_loss = 0, final_loss = 0;  // mean over the first / last 20 steps
  double seconds = 0;
  double tokens_per_s = 0;
  bool cached = false;  // out_dir already held this checkpoint
};

// Trains on `corpus` (documents, concatenated with <|endoftext|> between them) and writes the
// checkpoint to out_dir atomically (a temporary folder renamed into place). If out_dir already
// holds a checkpoint from the same options and corpus, returns it as cached without training.
Result<PretrainReport> Pretrain(const PretrainOptions& options,
                                const std::vector<std::string>& corpus);

}  // namespace marlaas::model

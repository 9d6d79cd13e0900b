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
  // Defaults tuned for the tiny base on the built-in tasks' corpus (tasks::TinyBaseCorpus):
  // 8-10 minutes on one core of a 2-core machine (497 s and 566 s in two ctest runs, 2026-12-07).
  int steps = 1800;
  int batch = 16;
  int seq_len = 128;  // the longest built-in documents (~100 tokens) fit whole
  float learning_rate = 5e-3f;
  int warmup_steps = 40;
  // Each training window starts at the beginning of a document (instead of at any token), so
  // every window holds at least one whole document: prompt and answer in the same context.
  bool align_to_documents = true;
  // When set, the tokens of a document up to and including the first occurrence of this text
  // (its prompt) weigh prompt_loss_weight in the loss, the rest (the answer and the end-of-text
  // after it) weigh 1, so the few tokens that carry the skills are not drowned out by the
  // prompts' random numbers. A document without it weighs 1 throughout; empty: every token
  // weighs 1. The built-in tasks' prompts end with "\nA:".
  std::string answer_marker = "\nA:";
  float prompt_loss_weight = 0.0f;
  std::function<void(const PretrainProgress&)> on_progress;  // every few steps
};

struct PretrainReport {
  // Mean over the first / last 20 steps of the (weighted, see answer_marker) training loss.
  float first_loss = 0, final_loss = 0;
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

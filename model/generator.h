// Generator: continuous batching over one Transformer. Sequences (each with its own adapter,
// sampling parameters and seed) join and leave between steps; each Step prefills the sequences
// that joined and decodes one token for the others, all in one packed forward. A sequence keeps
// the adapter object it started with, so publishing a tenant's new adapter affects only that
// tenant's later sequences: no global pause. On a CUDA device the adapters in use are resident
// in a LoraPool (copied in when their first sequence joins, freed when their last one leaves)
// and the logits come back to the CPU for sampling. The sequences' caches share one KvArena, so
// the decoding rows attend together. One thread drives a Generator.
//
// Memory running out is survivable: a Step that throws (out of memory or anything else) has
// advanced no sequence, sampled nothing and left every key/value cache as it was (KvArena stays
// whole when its growth fails), so the next Step does that step again and samples what it would
// have. A caller short of memory can take sequences out (Remove), which gives their slots back,
// and add them again later with their tokens so far after the prompt.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "model/kv_cache.h"
#include "model/lora_pool.h"
#include "model/sampler.h"
#include "model/transformer.h"

namespace marlaas::model {

struct GenerationRequest {
  uint64_t id = 0;
  std::vector<int32_t> prompt;                 // at least one token
  std::shared_ptr<const LoraAdapter> adapter;  // null: base model
  SamplingParams sampling;
  uint64_t seed = 0;
  int32_t max_new_tokens = 64;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these
};

struct GenerationResult {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // generated (stop token included)
  std::vector<float> logprobs;  // behaviour log-prob of each generated token
  bool hit_stop = false;        // false: reached max_new_tokens
};

// What one Step computed: its cost drivers (the simulator's calibration, bench/sim).
struct StepShape {
  size_t rows = 0;      // sequences in the pass (each samples a token)
  size_t tokens = 0;    // tokens computed: a prompt per distinct joining prompt, 1 per other row
  size_t adapters = 0;  // distinct adapters (LoRA segments)
};

class Generator {
 public:
  // With `adapter_pool` the adapters go through a LoraPool on any device (always on CUDA).
  explicit Generator(const Transformer& model, bool adapter_pool = false);

  // The sequence joins the batch at the next Step (its key/value slot is taken there). Throws
  // (c10::Error) when its adapter cannot be placed on the model's device (e.g. a rank above
  // LoraPool::kMaxPoolRank).
  void Add(GenerationRequest request);
  // Advances every active sequence by one token; returns those that finished. Throws as
  // LibTorch does (c10::Error, std::bad_alloc); then nothing advanced (see above).
  std::vector<GenerationResult> Step();
  // Takes sequence `id` out of the batch: what it generated so far (hit_stop false), or nothing
  // when no active sequence has that id. Its memory goes back.
  std::optional<GenerationResult> Remove(uint64_t id);
  // The active sequences' ids, in the order they were added.
  std::vector<uint64_t> ActiveIds() const;
  size_t active() const { return seqs_.size(); }
  const LoraPool* pool() const { return pool_.get(); }  // null without one
  const StepShape& last_step() const { return last_step_; }
  // The sequences' shared key/value memory (its size: slots x capacity positions).
  const KvArena& kv_arena() const { return *arena_; }
  // With no sequence: back to a fresh arena of the initial size (a caller idle for a while gives
  // the memory back); with any, nothing. Not done at every idle moment: a lockstep caller is idle
  // between every two rounds and would regrow the arena each round.
  void ReleaseIdleMemory();

 private:
  struct Sequence {
    GenerationRequest req;
    std::optional<KvCache> cache;  // taken at its first Step (taking one may grow the arena)
    SamplerRng rng;
    GenerationResult result;
    bool prefilled = false;  // its cache holds the prompt and every token but the last sampled
    int pool_slot = -1;
  };
  std::vector<GenerationResult> StepOrThrow();
  // After a step: once the longest live sequence needs a quarter of the arena's positions or
  // less (a long one has left), the arena keeps twice that many.
  void TrimArena();

  const Transformer& model_;
  std::shared_ptr<KvArena> arena_;  // every sequence's cache: Step batches their attention
  std::unique_ptr<LoraPool> pool_;  // only on a CUDA device
  std::vector<std::unique_ptr<Sequence>> seqs_;
  StepShape last_step_;
};

}  // namespace marlaas::model

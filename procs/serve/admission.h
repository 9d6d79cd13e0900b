// Admission control: how much memory a tenant will take, estimated from its job spec and the base
// model's config.json, so that the service can refuse a submit that would exceed its budget
// before anything is allocated. The estimate counts, in bytes:
//   LoRA parameters P = layers × Σ over the job's targets of rank × (in + out);
//   trainer: weights, gradients and two AdamW moments (16 B per parameter); adapter store: two
//   buffers (8 B); rollout: the adapter in use (4 B)                          -> 28 × P
//   rollout KV cache for the rows it may have in flight, (max_staleness + 1) × prompts_per_step
//   × group_size sequences of kPromptAllowance + max_new_tokens positions     -> 8 B × layers ×
//   kv_heads × head_dim per position
//   trainer activations for one step's prompts_per_step × group_size sequences -> 4 B × positions
//   × layers × (12 × hidden + 3 × intermediate)
// It is an estimate for admission, not an accounting of what the processes hold. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "proto/marlaas.pb.h"

namespace marlaas::serve {

inline constexpr uint64_t kPromptAllowance = 256;  // tokens assumed for a prompt

// The estimate above; errors name config.json fields that are missing.
Result<uint64_t> EstimateTenantBytes(const pb::JobSpec& spec, const std::string& model_dir);

// Whether the job's answers fit the positions the base was trained for: a max_new_tokens that
// leaves no room for a prompt is refused naming both numbers. (A prompt that does not fit with
// it fails the tenant at the rollout, which tokenizes it.)
Status CheckFitsBasePositions(const pb::JobSpec& spec, const std::string& model_dir);

// The budget serve admits against on the CPU when none is given (--memory-budget-mb): the memory
// this host lets the service use (base/host_memory.h), less the base model's weights (its
// *.safetensors files) as the `host_model_copies` model processes (the trainer and every rollout
// replica) hold them: f32 files are mapped and shared, so once; 16-bit ones are converted to f32
// in each process, so twice their size per process. `source` says how it was reckoned, for the
// refusal message. Unknown host memory: bytes 0 (no budget). Weights that fill the host: 1 byte
// (every tenant is refused, and the message says why). On a GPU the estimate is mostly of device
// memory, which this does not measure: serve sets no default budget there.
struct MemoryBudget {
  uint64_t bytes = 0;
  std::string source;
};
MemoryBudget DefaultMemoryBudget(const std::string& model_dir, int host_model_copies);

}  // namespace marlaas::serve

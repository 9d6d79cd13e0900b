// The clipped, importance-weighted GRPO objective for one tenant's batch (DESIGN.md §1):
//   rho = exp(logp_theta - logp_behaviour) per generated token (mask m = 1),
//   L = -(1/n) sum m * min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)
//       + beta * (1/n) sum m * KL_k3,   KL_k3 = exp(ref - theta) - (ref - theta) - 1,
// with n = sum m + TenantBatch::skipped_tokens (the step's degenerate groups' tokens) and
// `ref` the base model's log-prob (LoRA off). Each tenant's loss is normalised by its own
// token count, so summing tenants' losses in one backward gives each tenant the gradient of its
// own step. Log-probs are of the temperature-scaled distribution the rollout sampled from.
#pragma once

#include "model/torch_pch.h"

namespace marlaas::rl {

struct GrpoConfig {
  float clip_eps_low = 0.2f;
  float clip_eps_high = 0.28f;
  float kl_beta = 0.0f;
};

struct TenantBatch {
  torch::Tensor logprobs;      // [N, T] log pi_theta of the sampled tokens (differentiable)
  torch::Tensor behaviour;     // [N, T] log-probs recorded at sampling time
  torch::Tensor mask;          // [N, T] 1 for generated tokens trained on, 0 for prompt/tool/pad
  torch::Tensor advantages;    // [N] one per completion
  torch::Tensor ref_logprobs;  // [N, T] base-model log-probs; needed when kl_beta > 0
  // Tokens of the step that are not in this batch but count in the loss's mean: its degenerate
  // groups' (advantage 0; see rl::TenantStep::skipped_tokens).
  int64_t skipped_tokens = 0;
};

struct GrpoLoss {
  torch::Tensor loss;        // scalar (ComputeGrpoLoss; undefined in GrpoLosses::tenants)
  double value = 0;          // the loss's value
  double clip_fraction = 0;  // share of tokens whose ratio lies outside [1 - eps_low, 1 + eps_high]
  double mean_kl = 0;        // mean KL_k3 per token of this batch (0 when not computed)
  int64_t tokens = 0;
};

GrpoLoss ComputeGrpoLoss(const TenantBatch& batch, const GrpoConfig& config);

// Several tenants' rows at once (rl::MultiTenantStep's buckets), in one set of ops whatever the
// number of tenants: row r belongs to tenant tenant_of[r], whose config and skipped tokens apply
// (batch.skipped_tokens is not read). `loss` is the sum of the tenants' losses, each exactly
// ComputeGrpoLoss of its own rows (up to rounding); `tenants` has each one's statistics.
struct GrpoLosses {
  torch::Tensor loss;
  std::vector<GrpoLoss> tenants;
};
GrpoLosses ComputeGrpoLosses(const TenantBatch& batch, const std::vector<int32_t>& tenant_of,
                             const std::vector<GrpoConfig>& configs,
                             const std::vector<int64_t>& skipped_tokens);

}  // namespace marlaas::rl

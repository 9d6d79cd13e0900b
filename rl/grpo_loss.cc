#include "rl/grpo_loss.h"

namespace marlaas::rl {

GrpoLoss ComputeGrpoLoss(const TenantBatch& b, const GrpoConfig& c) {
  TORCH_CHECK(b.logprobs.dim() == 2, "logprobs must be [completions, tokens]");
  GrpoLosses all = ComputeGrpoLosses(b, std::vector<int32_t>(size_t(b.logprobs.size(0)), 0), {c},
                                     {b.skipped_tokens});
  GrpoLoss out = all.tenants[0];
  out.loss = all.loss;
  return out;
}

GrpoLosses ComputeGrpoLosses(const TenantBatch& b, const std::vector<int32_t>& tenant_of,
                             const std::vector<GrpoConfig>& configs,
                             const std::vector<int64_t>& skipped_tokens) {
  TORCH_CHECK(b.logprobs.sizes() == b.behaviour.sizes() && b.logprobs.sizes() == b.mask.sizes(),
              "logprobs, behaviour and mask must have the same shape");
  TORCH_CHECK(b.logprobs.dim() == 2, "logprobs must be [completions, tokens]");
  TORCH_CHECK(b.advantages.dim() == 1 && b.advantages.size(0) == b.logprobs.size(0),
              "one advantage per completion");
  const size_t rows = size_t(b.logprobs.size(0)), tenants = configs.size();
  TORCH_CHECK(tenant_of.size() == rows, "one tenant per completion");
  TORCH_CHECK(skipped_tokens.size() == tenants, "one skipped-token count per tenant");
  bool any_kl = false;
  for (size_t k = 0; k < tenants; ++k) {
    TORCH_CHECK(skipped_tokens[k] >= 0, "skipped_tokens must not be negative");
    any_kl = any_kl || configs[k].kl_beta > 0;
  }
  for (int32_t k : tenant_of) TORCH_CHECK(k >= 0 && size_t(k) < tenants, "tenant out of range");
  if (any_kl) {
    TORCH_CHECK(b.ref_logprobs.defined() && b.ref_logprobs.sizes() == b.logprobs.sizes(),
                "kl_beta > 0 needs reference log-probs of the same shape");
  }
  const auto mask = b.mask.to(torch::kFloat32);
  // Each tenant's tokens first: they set its rows' weights (1/n, with n = its tokens plus its
  // skipped ones), clip range and KL coefficient.
  const auto row_tokens = mask.sum(1).to(torch::kCPU, torch::kFloat64).contiguous();
  const double* rt = row_tokens.data_ptr<double>();
  GrpoLosses out;
  out.tenants.resize(tenants);
  for (size_t r = 0; r < rows; ++r) out.tenants[size_t(tenant_of[r])].tokens += int64_t(rt[r]);
  std::vector<float> weight(rows), kl_weight(rows), low(rows), high(rows);
  for (size_t r = 0; r < rows; ++r) {
    const size_t k = size_t(tenant_of[r]);
    const double n = double(out.tenants[k].tokens + skipped_tokens[k]);
    // A tenant without tokens contributes nothing (its rows stay in the graph, weighted 0).
    weight[r] = out.tenants[k].tokens > 0 ? float(1.0 / n) : 0.0f;
    kl_weight[r] = weight[r] * configs[k].kl_beta;
    low[r] = 1.0f - configs[k].clip_eps_low;
    high[r] = 1.0f + configs[k].clip_eps_high;
  }
  const auto opts = b.logprobs.options().requires_grad(false);
  auto per_row = [&](const std::vector<float>& v) {
    return torch::tensor(v, torch::kFloat32).to(opts.device()).view({int64_t(rows), 1});
  };
  const auto ratio = torch::exp(b.logprobs - b.behaviour);
  const auto adv = b.advantages.unsqueeze(1).to(torch::kFloat32);
  const auto clipped = torch::clamp(ratio, per_row(low), per_row(high));
  const auto objective = torch::min(ratio * adv, clipped * adv);
  const auto row_objective = (objective * mask).sum(1, /*keepdim=*/true);
  auto loss = -(row_objective * per_row(weight)).sum();
  torch::Tensor row_kl;
  if (any_kl) {
    // Only at trained positions: elsewhere (prompt, tool results, padding) ref - logp may be
    // large enough that exp overflows, and inf * 0 would be NaN in the loss and the gradient.
    const auto d =
        torch::where(mask > 0, b.ref_logprobs - b.logprobs, torch::zeros_like(b.logprobs));
    row_kl = ((torch::exp(d) - d - 1) * mask).sum(1, /*keepdim=*/true);
    loss = loss + (row_kl * per_row(kl_weight)).sum();
  }
  out.loss = loss;
  // The per-row sums on the CPU in one copy: objective, clipped tokens, KL.
  torch::Tensor sums;
  {
    torch::NoGradGuard no_grad;
    const auto row_clipped = ((ratio != clipped).to(torch::kFloat32) * mask).sum(1, true);
    sums = torch::cat({row_objective.detach(), row_clipped,
                       any_kl ? row_kl.detach() : torch::zeros_like(row_clipped)},
                      1)
               .to(torch::kCPU, torch::kFloat64)
               .contiguous();
  }
  const double* s = sums.data_ptr<double>();
  std::vector<double> objective_of(tenants, 0), clipped_of(tenants, 0), kl_of(tenants, 0);
  for (size_t r = 0; r < rows; ++r) {
    const size_t k = size_t(tenant_of[r]);
    objective_of[k] += s[3 * r];
    clipped_of[k] += s[3 * r + 1];
    kl_of[k] += s[3 * r + 2];
  }
  for (size_t k = 0; k < tenants; ++k) {
    GrpoLoss& t = out.tenants[k];
    if (t.tokens == 0) continue;
    const double n = double(t.tokens + skipped_tokens[k]);
    t.clip_fraction = clipped_of[k] / double(t.tokens);
    if (configs[k].kl_beta > 0) t.mean_kl = kl_of[k] / double(t.tokens);  // over its own tokens
    t.value = -objective_of[k] / n + configs[k].kl_beta * kl_of[k] / n;
  }
  return out;
}

}  // namespace marlaas::rl

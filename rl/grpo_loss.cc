#include "rl/grpo_loss.h"

namespace marlaas::rl {

GrpoLoss ComputeGrpoLoss(const TenantBatch& b, const GrpoConfig& c) {
  TORCH_CHECK(b.logprobs.sizes() == b.behaviour.sizes() && b.logprobs.sizes() == b.mask.sizes(),
              "logprobs, behaviour and mask must have the same shape");
  TORCH_CHECK(b.advantages.dim() == 1 && b.advantages.size(0) == b.logprobs.size(0),
              "one advantage per completion");
  GrpoLoss out;
  const auto mask = b.mask.to(torch::kFloat32);
  const double tokens = mask.sum().item<double>();
  out.tokens = int64_t(tokens);
  TORCH_CHECK(b.skipped_tokens >= 0, "skipped_tokens must not be negative");
  const double n = tokens + double(b.skipped_tokens);
  if (tokens == 0) {
    out.loss = (b.logprobs * 0).sum();  // keeps the graph connected, contributes nothing
    return out;
  }
  const auto ratio = torch::exp(b.logprobs - b.behaviour);
  const auto adv = b.advantages.unsqueeze(1).to(torch::kFloat32);
  const auto clipped = torch::clamp(ratio, 1.0 - c.clip_eps_low, 1.0 + c.clip_eps_high);
  const auto objective = torch::min(ratio * adv, clipped * adv);
  auto loss = -(objective * mask).sum() / n;
  {
    torch::NoGradGuard no_grad;
    const auto was_clipped = (ratio != clipped).to(torch::kFloat32) * mask;
    out.clip_fraction = was_clipped.sum().item<double>() / tokens;
  }
  if (c.kl_beta > 0) {
    TORCH_CHECK(b.ref_logprobs.defined() && b.ref_logprobs.sizes() == b.logprobs.sizes(),
                "kl_beta > 0 needs reference log-probs of the same shape");
    const auto d = b.ref_logprobs - b.logprobs;
    const auto kl = (torch::exp(d) - d - 1) * mask;
    const auto kl_sum = kl.sum();
    out.mean_kl = kl_sum.item<double>() / tokens;  // over the tokens it was computed on
    loss = loss + c.kl_beta * kl_sum / n;
  }
  out.loss = loss;
  return out;
}

}  // namespace marlaas::rl

#include "rl/multi_tenant_step.h"

#include <algorithm>

#include "model/token_logprobs.h"

namespace marlaas::rl {

namespace {

// The summed losses of tenants[begin, end) (rows padded to their own longest completion), with
// each tenant's statistics filled into results.
torch::Tensor BucketLoss(const model::Transformer& model, std::vector<TenantStep>& tenants,
                         const std::vector<size_t>& members,
                         std::vector<TenantStepResult>* results) {
  int64_t rows = 0, max_len = 2;
  for (size_t k : members) {
    rows += int64_t(tenants[k].completions.size());
    for (const Completion& c : tenants[k].completions)
      max_len = std::max<int64_t>(max_len, int64_t(c.tokens.size()));
  }
  if (rows == 0) return torch::Tensor();
  auto tokens = torch::zeros({rows, max_len}, torch::kInt64);
  auto behaviour = torch::zeros({rows, max_len});
  auto mask = torch::zeros({rows, max_len});
  model::LoraRouting routing;
  std::vector<int64_t> first_row(members.size());
  int64_t r = 0;
  for (size_t m = 0; m < members.size(); ++m) {
    const TenantStep& t = tenants[members[m]];
    routing.adapters.push_back(t.adapter);
    first_row[m] = r;
    for (const Completion& c : t.completions) {
      const int64_t n = int64_t(c.tokens.size());
      tokens[r].narrow(0, 0, n).copy_(
          torch::tensor(std::vector<int64_t>(c.tokens.begin(), c.tokens.end())));
      behaviour[r].narrow(0, 0, n).copy_(torch::tensor(c.behaviour_logprobs));
      mask[r].narrow(0, 0, n).copy_(
          torch::tensor(std::vector<float>(c.loss_mask.begin(), c.loss_mask.end())));
      routing.row_adapter.push_back(int32_t(m));
      ++r;
    }
  }
  // Built on the CPU, trained where the model is (one copy each).
  tokens = tokens.to(model.device());
  behaviour = behaviour.to(model.device());
  mask = mask.to(model.device());
  // The log-prob of token t comes from the logits at position t - 1. Tenants may sample at
  // different temperatures, so the fused op runs per tenant on its rows.
  const auto hidden = model.Hidden(tokens, &routing);
  // Split per tenant (a narrow per tenant would make the backward quadratic in tenants: each
  // narrow's gradient is a zero tensor the size of the whole batch).
  std::vector<int64_t> rows_of;
  for (size_t k : members) rows_of.push_back(int64_t(tenants[k].completions.size()));
  const std::vector<torch::Tensor> hidden_of = hidden.split_with_sizes(rows_of, 0);
  const auto& lm_head = model.weights().lm_head;
  torch::Tensor total;
  for (size_t m = 0; m < members.size(); ++m) {
    const TenantStep& t = tenants[members[m]];
    const int64_t n = int64_t(t.completions.size());
    if (n == 0) continue;
    auto h = hidden_of[m].narrow(1, 0, max_len - 1);
    auto logits = torch::matmul(h, lm_head.t()).reshape({n * (max_len - 1), -1});
    auto targets = tokens.narrow(0, first_row[m], n).narrow(1, 1, max_len - 1).reshape({-1});
    auto logp = model::TokenLogprobs(logits, targets, t.temperature).view({n, max_len - 1});
    std::vector<float> adv;
    for (const Completion& c : t.completions) adv.push_back(c.advantage);
    TenantBatch b{logp, behaviour.narrow(0, first_row[m], n).narrow(1, 1, max_len - 1),
                  mask.narrow(0, first_row[m], n).narrow(1, 1, max_len - 1),
                  torch::tensor(adv).to(model.device()), torch::Tensor()};
    if (t.grpo.kl_beta > 0) {
      torch::NoGradGuard no_grad;  // the base: same weights, LoRA off
      auto ref_hidden =
          model.Hidden(tokens.narrow(0, first_row[m], n), nullptr).narrow(1, 0, max_len - 1);
      auto ref_logits = torch::matmul(ref_hidden, lm_head.t()).reshape({n * (max_len - 1), -1});
      b.ref_logprobs =
          model::TokenLogprobs(ref_logits, targets, t.temperature).view({n, max_len - 1});
    }
    GrpoLoss loss = ComputeGrpoLoss(b, t.grpo);
    TenantStepResult& res = (*results)[members[m]];
    res.loss = loss.loss.item<double>();
    res.clip_fraction = loss.clip_fraction;
    res.tokens = loss.tokens;
    res.padded_tokens = n * max_len;
    total = total.defined() ? total + loss.loss : loss.loss;
  }
  return total;
}

}  // namespace

std::vector<TenantStepResult> MultiTenantStep(const model::Transformer& model,
                                              std::vector<TenantStep>& tenants) {
  std::vector<TenantStepResult> results(tenants.size());
  // Tenants sorted by their longest completion, cut into buckets whose rows are padded to the
  // bucket's longest: short-answer tenants do not pay for long ones. A new bucket starts when
  // padding to its first (longest) tenant would more than double a tenant's tokens.
  std::vector<size_t> order(tenants.size());
  std::vector<int64_t> longest(tenants.size(), 0);
  for (size_t k = 0; k < tenants.size(); ++k) {
    order[k] = k;
    for (const Completion& c : tenants[k].completions) {
      TORCH_CHECK(
          c.tokens.size() == c.behaviour_logprobs.size() && c.tokens.size() == c.loss_mask.size(),
          "tokens, behaviour log-probs and loss mask must align");
      longest[k] = std::max<int64_t>(longest[k], int64_t(c.tokens.size()));
    }
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return longest[a] > longest[b]; });
  torch::Tensor total;
  for (size_t i = 0; i < order.size();) {
    std::vector<size_t> bucket = {order[i]};
    size_t j = i + 1;
    while (j < order.size() && longest[order[j]] * 2 >= longest[order[i]])
      bucket.push_back(order[j++]);
    torch::Tensor loss = BucketLoss(model, tenants, bucket, &results);
    if (loss.defined()) total = total.defined() ? total + loss : loss;
    i = j;
  }
  if (!total.defined()) return results;
  for (TenantStep& t : tenants) t.optimizer->zero_grad();
  total.backward();
  for (size_t k = 0; k < tenants.size(); ++k) {
    TenantStep& t = tenants[k];
    auto& flat = t.adapter->flat();
    if (!flat.grad().defined()) continue;
    results[k].grad_norm = flat.grad().norm().item<double>();
    if (t.grad_clip > 0)
      torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{flat}, t.grad_clip);
    t.optimizer->step();
  }
  return results;
}

}  // namespace marlaas::rl

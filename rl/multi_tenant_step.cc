#include "rl/multi_tenant_step.h"

#include <algorithm>
#include <cmath>

#include "model/token_logprobs.h"
#include "model/torch_error.h"

namespace marlaas::rl {

namespace {

// Shortest prefix worth sharing: below it the extra prefix rows and attention cost more than the
// positions saved.
constexpr int64_t kMinShared = 4;

// Where a row of the padded batch comes from: its completion, and the prefix row it continues
// after `offset` tokens (offset 0: no prefix).
struct Row {
  const Completion* c;
  int64_t prefix = 0;
  int64_t offset = 0;
};

// The index of the first trained token of c (its length when none is trained).
int64_t FirstTrained(const Completion& c) {
  for (size_t i = 0; i < c.loss_mask.size(); ++i)
    if (c.loss_mask[i]) return int64_t(i);
  return int64_t(c.tokens.size());
}

// Consecutive completions of one tenant that begin with the same tokens (a GRPO group's prompt)
// become one prefix row: tokens [0, L) with L = (their common prefix, cut before the first token
// any of them trains on) - 1, so that the last prefix token, whose logits give the first trained
// token's log-prob, is in every suffix. Appends the prefixes to `prefixes` and the rows to `rows`.
void PlanRows(const std::vector<Completion>& cs, bool share,
              std::vector<std::vector<int32_t>>* prefixes, std::vector<Row>* rows) {
  size_t i = 0;
  while (i < cs.size()) {
    int64_t shared = FirstTrained(cs[i]) - 1;
    size_t j = i + 1;
    while (share && j < cs.size()) {
      int64_t common = 0;
      const int64_t limit =
          std::min<int64_t>(std::min(shared, FirstTrained(cs[j]) - 1),
                            int64_t(std::min(cs[i].tokens.size(), cs[j].tokens.size())));
      while (common < limit && cs[i].tokens[size_t(common)] == cs[j].tokens[size_t(common)])
        ++common;
      if (common < kMinShared) break;
      shared = common;
      ++j;
    }
    if (j - i >= 2) {
      const int64_t p = int64_t(prefixes->size());
      prefixes->emplace_back(cs[i].tokens.begin(), cs[i].tokens.begin() + shared);
      for (size_t k = i; k < j; ++k) rows->push_back(Row{&cs[k], p, shared});
    } else {
      rows->push_back(Row{&cs[i], 0, 0});
    }
    i = j;
  }
}

// The summed losses of the tenants `members` (rows padded to their bucket's longest), with each
// tenant's statistics filled into results.
torch::Tensor BucketLoss(const model::Transformer& model, std::vector<TenantStep>& tenants,
                         const std::vector<size_t>& members, bool share_prompts,
                         std::vector<TenantStepResult>* results) {
  std::vector<std::vector<int32_t>> prefixes;
  std::vector<Row> rows;
  std::vector<int64_t> rows_of, prefixes_of;
  model::LoraRouting routing, prefix_routing;
  for (size_t m = 0; m < members.size(); ++m) {
    const TenantStep& t = tenants[members[m]];
    routing.adapters.push_back(t.adapter);
    const size_t rows_before = rows.size(), prefixes_before = prefixes.size();
    PlanRows(t.completions, share_prompts, &prefixes, &rows);
    rows_of.push_back(int64_t(rows.size() - rows_before));
    prefixes_of.push_back(int64_t(prefixes.size() - prefixes_before));
    routing.row_adapter.insert(routing.row_adapter.end(), rows.size() - rows_before, int32_t(m));
    prefix_routing.row_adapter.insert(prefix_routing.row_adapter.end(),
                                      prefixes.size() - prefixes_before, int32_t(m));
  }
  prefix_routing.adapters = routing.adapters;
  if (rows.empty()) return torch::Tensor();
  int64_t max_len = 2, prefix_len = 0;
  for (const Row& r : rows) max_len = std::max(max_len, int64_t(r.c->tokens.size()) - r.offset);
  for (const auto& p : prefixes) prefix_len = std::max(prefix_len, int64_t(p.size()));
  const int64_t n_rows = int64_t(rows.size());
  auto tokens = torch::zeros({n_rows, max_len}, torch::kInt64);
  auto behaviour = torch::zeros({n_rows, max_len});
  auto mask = torch::zeros({n_rows, max_len});
  std::vector<int64_t> prefix_of, offset;
  for (int64_t r = 0; r < n_rows; ++r) {
    const Completion& c = *rows[size_t(r)].c;
    const int64_t o = rows[size_t(r)].offset, n = int64_t(c.tokens.size()) - o;
    tokens[r].narrow(0, 0, n).copy_(
        torch::tensor(std::vector<int64_t>(c.tokens.begin() + o, c.tokens.end())));
    behaviour[r].narrow(0, 0, n).copy_(torch::tensor(
        std::vector<float>(c.behaviour_logprobs.begin() + o, c.behaviour_logprobs.end())));
    mask[r].narrow(0, 0, n).copy_(
        torch::tensor(std::vector<float>(c.loss_mask.begin() + o, c.loss_mask.end())));
    prefix_of.push_back(rows[size_t(r)].prefix);
    offset.push_back(o);
  }
  // Built on the CPU, trained where the model is (one copy each).
  tokens = tokens.to(model.device());
  behaviour = behaviour.to(model.device());
  mask = mask.to(model.device());
  torch::Tensor prefix_tokens;
  if (!prefixes.empty()) {
    prefix_tokens = torch::zeros({int64_t(prefixes.size()), prefix_len}, torch::kInt64);
    for (size_t p = 0; p < prefixes.size(); ++p) {
      prefix_tokens[int64_t(p)]
          .narrow(0, 0, int64_t(prefixes[p].size()))
          .copy_(torch::tensor(std::vector<int64_t>(prefixes[p].begin(), prefixes[p].end())));
    }
  }
  // The hidden states of the suffix rows, with the LoRA of each row's tenant (or none).
  auto hidden_of_rows = [&](bool with_lora) {
    if (prefixes.empty()) return model.Hidden(tokens, with_lora ? &routing : nullptr);
    return model.HiddenShared(prefix_tokens, with_lora ? &prefix_routing : nullptr, tokens,
                              with_lora ? &routing : nullptr, prefix_of, offset);
  };
  // The log-prob of token t comes from the logits at position t - 1, of the temperature-scaled
  // distribution its tenant sampled from: the lm_head and the fused op run once per run of
  // consecutive tenants with the same temperature (usually the whole bucket).
  std::vector<int64_t> run_rows;  // rows of each run
  std::vector<size_t> run_first;  // its first member
  for (size_t m = 0; m < members.size(); ++m) {
    if (m == 0 ||
        tenants[members[m]].temperature != tenants[members[run_first.back()]].temperature) {
      run_first.push_back(m);
      run_rows.push_back(0);
    }
    run_rows.back() += rows_of[m];
  }
  const auto hidden = hidden_of_rows(true);
  // Split per run (a narrow per run would make the backward quadratic in runs: each narrow's
  // gradient is a zero tensor the size of the whole batch).
  const std::vector<torch::Tensor> hidden_of = hidden.split_with_sizes(run_rows, 0);
  std::vector<torch::Tensor> ref_hidden_of;
  std::vector<GrpoConfig> configs;
  std::vector<int64_t> skipped;
  bool any_kl = false;
  for (size_t k : members) {
    any_kl = any_kl || tenants[k].grpo.kl_beta > 0;
    configs.push_back(tenants[k].grpo);
    skipped.push_back(tenants[k].skipped_tokens);
  }
  if (any_kl) {
    torch::NoGradGuard no_grad;  // the base: same weights, LoRA off
    ref_hidden_of = hidden_of_rows(false).split_with_sizes(run_rows, 0);
  }
  const auto& lm_head = model.weights().lm_head;
  auto logprobs_of = [&](const torch::Tensor& h, int64_t row0, int64_t n, float temperature) {
    auto logits =
        torch::matmul(h.narrow(1, 0, max_len - 1), lm_head.t()).reshape({n * (max_len - 1), -1});
    auto targets = tokens.narrow(0, row0, n).narrow(1, 1, max_len - 1).reshape({-1});
    return model::TokenLogprobs(logits, targets, temperature).view({n, max_len - 1});
  };
  std::vector<torch::Tensor> logp, ref_logp;
  int64_t row0 = 0;
  for (size_t i = 0; i < run_rows.size(); ++i) {
    const float temperature = tenants[members[run_first[i]]].temperature;
    logp.push_back(logprobs_of(hidden_of[i], row0, run_rows[i], temperature));
    if (any_kl) {
      torch::NoGradGuard no_grad;
      ref_logp.push_back(logprobs_of(ref_hidden_of[i], row0, run_rows[i], temperature));
    }
    row0 += run_rows[i];
  }
  std::vector<float> adv;
  std::vector<int32_t> tenant_of;
  for (size_t m = 0, r = 0; m < members.size(); ++m) {
    for (int64_t i = 0; i < rows_of[m]; ++i, ++r) {
      adv.push_back(rows[r].c->advantage);
      tenant_of.push_back(int32_t(m));
    }
  }
  TenantBatch b{logp.size() == 1 ? logp[0] : torch::cat(logp, 0),
                behaviour.narrow(1, 1, max_len - 1), mask.narrow(1, 1, max_len - 1),
                torch::tensor(adv).to(model.device()), torch::Tensor()};
  if (any_kl) b.ref_logprobs = ref_logp.size() == 1 ? ref_logp[0] : torch::cat(ref_logp, 0);
  GrpoLosses losses = ComputeGrpoLosses(b, tenant_of, configs, skipped);
  int64_t first_row = 0;
  for (size_t m = 0; m < members.size(); ++m) {
    const int64_t n = rows_of[m], r0 = first_row;
    first_row += n;
    if (n == 0) continue;
    const GrpoLoss& loss = losses.tenants[m];
    TenantStepResult& res = (*results)[members[m]];
    res.loss = loss.value;
    res.clip_fraction = loss.clip_fraction;
    res.mean_kl = loss.mean_kl;
    res.tokens = loss.tokens;
    res.padded_tokens = n * max_len + prefixes_of[m] * prefix_len;
    // Padded to its own longest suffix and prefix instead of the bucket's.
    int64_t own_len = 0, own_prefix = 0;
    for (int64_t r = r0; r < r0 + n; ++r) {
      const Row& row = rows[size_t(r)];
      own_len = std::max(own_len, int64_t(row.c->tokens.size()) - row.offset);
      own_prefix = std::max(own_prefix, row.offset);
    }
    res.own_padded_tokens = n * own_len + prefixes_of[m] * own_prefix;
    res.own_prefix_rows = prefixes_of[m];
    res.own_prefix_tokens = prefixes_of[m] * own_prefix;
  }
  return losses.loss;
}

}  // namespace

std::vector<TenantStepResult> MultiTenantStep(const model::Transformer& model,
                                              std::vector<TenantStep>& tenants,
                                              bool share_prompts) {
  std::vector<TenantStepResult> results(tenants.size());
  // Tenants sorted by their longest row (what follows its shared prompt, if any), cut into
  // buckets whose rows are padded to the bucket's longest: short-answer tenants do not pay for
  // long ones. A new bucket starts when padding to its first (longest) tenant would more than
  // double a tenant's tokens. (Shared prompts are padded to the bucket's longest prompt too, but
  // there is one per group.)
  std::vector<size_t> order(tenants.size());
  std::vector<int64_t> longest(tenants.size(), 0);
  for (size_t k = 0; k < tenants.size(); ++k) {
    order[k] = k;
    for (const Completion& c : tenants[k].completions) {
      TORCH_CHECK(
          c.tokens.size() == c.behaviour_logprobs.size() && c.tokens.size() == c.loss_mask.size(),
          "tokens, behaviour log-probs and loss mask must align");
    }
    std::vector<std::vector<int32_t>> prefixes;
    std::vector<Row> rows;
    PlanRows(tenants[k].completions, share_prompts, &prefixes, &rows);
    for (const Row& r : rows)
      longest[k] = std::max<int64_t>(longest[k], int64_t(r.c->tokens.size()) - r.offset);
  }
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return longest[a] > longest[b]; });
  torch::Tensor total;
  for (size_t i = 0; i < order.size();) {
    std::vector<size_t> bucket = {order[i]};
    size_t j = i + 1;
    while (j < order.size() && longest[order[j]] * 2 >= longest[order[i]])
      bucket.push_back(order[j++]);
    torch::Tensor loss = BucketLoss(model, tenants, bucket, share_prompts, &results);
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
    // Each tenant's update on its own: one that throws here (e.g. out of memory for AdamW's
    // first state) does not undo or repeat the others', and nothing above this loop has
    // updated anyone, so a caller may retry a step that threw (MultiTenantStepIsolated).
    try {
      results[k].grad_norm = flat.grad().norm().item<double>();
      if (!std::isfinite(results[k].grad_norm)) {  // an update would make the adapter NaN
        results[k].not_finite = true;
        continue;
      }
      if (t.grad_clip > 0)
        torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{flat}, t.grad_clip);
      t.optimizer->step();
    } catch (const std::exception& e) {
      results[k].error = "its update failed: " + model::TorchErrorText(e);
      results[k].out_of_memory = model::IsOutOfMemory(e);
    }
  }
  return results;
}

IsolatedSteps MultiTenantStepIsolated(const model::Transformer& model,
                                      std::vector<TenantStep>& tenants, bool share_prompts,
                                      const std::function<void()>& after_each_retry) {
  IsolatedSteps out;
  out.results.resize(tenants.size());
  out.failed.resize(tenants.size());
  out.out_of_memory.resize(tenants.size());
  try {
    out.results = MultiTenantStep(model, tenants, share_prompts);
  } catch (const std::exception& shared) {
    for (size_t k = 0; k < tenants.size(); ++k) {
      if (tenants.size() == 1) {
        out.failed[k] = "training step failed: " + model::TorchErrorText(shared);
        out.out_of_memory[k] = model::IsOutOfMemory(shared);
        break;
      }
      std::vector<TenantStep> alone = {tenants[k]};
      try {
        out.results[k] = MultiTenantStep(model, alone, share_prompts)[0];
      } catch (const std::exception& e) {
        out.failed[k] = "training step failed: " + model::TorchErrorText(e);
        out.out_of_memory[k] = model::IsOutOfMemory(e);
      }
      if (after_each_retry) after_each_retry();
    }
  }
  for (size_t k = 0; k < tenants.size(); ++k) {
    if (out.failed[k].empty() && !out.results[k].error.empty()) {
      out.failed[k] = "training step failed: " + out.results[k].error;
      out.out_of_memory[k] = out.results[k].out_of_memory;
    }
    if (out.failed[k].empty() && out.results[k].not_finite) {
      out.failed[k] = "training step failed: the gradient is not finite (grad norm " +
                      std::to_string(out.results[k].grad_norm) + "); the adapter was not updated";
    }
  }
  return out;
}

}  // namespace marlaas::rl

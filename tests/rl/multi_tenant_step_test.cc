// Acceptance: one batched multi-tenant GRPO step leaves every tenant's adapter where a separate
// per-tenant step would (parameters within 1e-6), and training actually moves reward-weighted
// log-probs the right way.
#include "rl/multi_tenant_step.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <new>
#include <random>
#include <stdexcept>

#include "model/compute_threads.h"
#include "model/generator.h"
#include "model/torch_error.h"
#include "tests/test_util.h"

namespace marlaas::rl {
namespace {

const std::string kData = MARLAAS_TEST_DATA_DIR;

struct Tenant {
  std::unique_ptr<model::LoraAdapter> adapter;
  std::unique_ptr<torch::optim::AdamW> opt;
  std::vector<Completion> completions;
  float temperature;
};

// `extra` lengthens every completion by that many generated tokens (long completions land in a
// batch of their own inside the step).
Tenant MakeTenant(const model::BaseWeights& w, uint32_t rank, uint32_t mask, uint64_t seed, int n,
                  float temperature, int extra = 0) {
  Tenant t;
  auto a = model::LoraAdapter::Create(w, rank, 16.0f, mask, seed);
  {
    torch::NoGradGuard g;
    torch::manual_seed(seed);
    a->flat().normal_(0, 0.05);
  }
  a->flat().set_requires_grad(true);
  t.adapter = std::make_unique<model::LoraAdapter>(std::move(*a));
  t.opt = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{t.adapter->flat()},
                                                torch::optim::AdamWOptions(1e-2));
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    Completion c;
    const int prompt = 2 + int(rng() % 4), gen = 1 + int(rng() % 6) + extra;
    for (int j = 0; j < prompt + gen; ++j) {
      c.tokens.push_back(int32_t(rng() % uint32_t(w.config.vocab_size)));
      c.loss_mask.push_back(j >= prompt ? 1 : 0);
      c.behaviour_logprobs.push_back(j >= prompt ? -5.0f - float(rng() % 100) / 50.0f : 0.0f);
    }
    c.advantage = float(int(rng() % 5) - 2);
    t.completions.push_back(c);
  }
  t.temperature = temperature;
  return t;
}

TenantStep StepOf(Tenant& t) {
  TenantStep s;
  s.adapter = t.adapter.get();
  s.optimizer = t.opt.get();
  s.completions = t.completions;
  s.temperature = t.temperature;
  s.grpo.kl_beta = 0.05f;
  return s;
}

TEST(MultiTenantStepTest, BatchedStepEqualsSeparatePerTenantSteps) {
  auto w = *model::BaseWeights::Load(kData + "/llama");
  model::Transformer model(w);
  const uint32_t all = (1u << kNumLoraTargets) - 1;
  // Two copies of four tenants: different ranks, targets, sizes, temperatures and lengths.
  std::vector<Tenant> batched, separate;
  for (auto* set : {&batched, &separate}) {
    set->push_back(MakeTenant(*w, 4, all, 1, 3, 1.0f));
    set->push_back(MakeTenant(*w, 8, 0b0000101, 2, 5, 0.7f));
    set->push_back(MakeTenant(*w, 2, 0b1110000, 3, 2, 1.3f));
    set->push_back(MakeTenant(*w, 4, all, 4, 3, 1.0f, 30));
  }
  const auto before = batched[0].adapter->flat().detach().clone();
  // After one step the parameters agree within 1e-6 (the acceptance bound; measured ~5e-8: the
  // batched rows are padded to their batch's longest completion, the separate ones to their own,
  // so reductions see different shapes and round differently). A second AdamW step divides by
  // the square root of a first-step second moment and grows that rounding ~30x; it is held to
  // 1e-5.
  for (const double bound : {1e-6, 1e-5}) {
    std::vector<TenantStep> all_steps;
    for (auto& t : batched) all_steps.push_back(StepOf(t));
    auto res = MultiTenantStep(model, all_steps);
    ASSERT_EQ(res.size(), 4u);
    // Padding: the first three share a batch padded to their longest row (each is within 2x of
    // it), the long fourth has one of its own; alone, each pads to its own longest.
    std::vector<int64_t> longest;
    for (auto& t : batched) {
      int64_t l = 0;
      for (const Completion& c : t.completions) l = std::max<int64_t>(l, int64_t(c.tokens.size()));
      longest.push_back(l);
    }
    const int64_t shared = std::max({longest[0], longest[1], longest[2]});
    for (size_t k = 0; k < 3; ++k) {
      ASSERT_GE(longest[k] * 2, shared);
      EXPECT_EQ(res[k].padded_tokens, int64_t(batched[k].completions.size()) * shared) << k;
    }
    EXPECT_EQ(res[3].padded_tokens, int64_t(batched[3].completions.size()) * longest[3]);
    for (size_t k = 0; k < separate.size(); ++k) {
      Tenant& t = separate[k];
      std::vector<TenantStep> one = {StepOf(t)};
      auto r1 = MultiTenantStep(model, one);
      ASSERT_EQ(r1.size(), 1u);
      // Each tenant's KL to the base (its adapter is random, so not 0), batched or not.
      EXPECT_GT(r1[0].mean_kl, 1e-3) << k;
      EXPECT_NEAR(res[k].mean_kl, r1[0].mean_kl, 1e-6 + 1e-3 * r1[0].mean_kl) << k;
      int64_t own = 0;
      for (const Completion& c : t.completions) own = std::max<int64_t>(own, c.tokens.size());
      EXPECT_EQ(r1[0].padded_tokens, int64_t(t.completions.size()) * own);
    }
    for (size_t k = 0; k < 4; ++k) {
      const double diff =
          (batched[k].adapter->flat() - separate[k].adapter->flat()).abs().max().item<double>();
      EXPECT_LT(diff, bound) << "tenant " << k;
    }
  }
  EXPECT_GT((batched[0].adapter->flat().detach() - before).abs().max().item<double>(), 1e-3)
      << "the step should move the parameters";
}

// `groups` GRPO groups of `g` completions: each group's completions share a random prompt of
// 6-20 tokens; in every group the first two completions also agree on their first two generated
// tokens (sharing must stop before the first trained token anyway).
Tenant MakeGroupedTenant(const model::BaseWeights& w, uint64_t seed, int groups, int g,
                         float temperature) {
  Tenant t = MakeTenant(w, 4, (1u << kNumLoraTargets) - 1, seed, 0, temperature);
  std::mt19937 rng(uint32_t(seed) * 7 + 1);
  const auto vocab = uint32_t(w.config.vocab_size);
  for (int k = 0; k < groups; ++k) {
    const int prompt = 6 + int(rng() % 15);
    std::vector<int32_t> p;
    for (int j = 0; j < prompt; ++j) p.push_back(int32_t(rng() % vocab));
    const int32_t a = int32_t(rng() % vocab), b = int32_t(rng() % vocab);
    for (int i = 0; i < g; ++i) {
      Completion c;
      c.tokens = p;
      c.loss_mask.assign(p.size(), 0);
      c.behaviour_logprobs.assign(p.size(), 0.0f);
      const int gen = 2 + int(rng() % 7);
      for (int j = 0; j < gen; ++j) {
        c.tokens.push_back(i < 2 && j < 2 ? (j == 0 ? a : b) : int32_t(rng() % vocab));
        c.loss_mask.push_back(1);
        c.behaviour_logprobs.push_back(-5.0f - float(rng() % 100) / 50.0f);
      }
      c.advantage = float(int(rng() % 5) - 2);
      t.completions.push_back(c);
    }
  }
  return t;
}

// Computing each group's prompt once gives the losses, gradients and updates of the unshared
// step (within rounding), and computes fewer positions.
TEST(MultiTenantStepTest, SharingEachGroupsPromptChangesNothingButTheWork) {
  auto w = *model::BaseWeights::Load(kData + "/llama");
  model::Transformer model(w);
  std::vector<Tenant> shared, unshared;
  for (auto* set : {&shared, &unshared}) {
    set->push_back(MakeGroupedTenant(*w, 1, 2, 4, 1.0f));
    set->push_back(MakeGroupedTenant(*w, 2, 3, 3, 0.7f));
    set->push_back(MakeTenant(*w, 4, (1u << kNumLoraTargets) - 1, 3, 3, 1.0f));  // no groups
  }
  std::vector<TenantStep> a, b;
  for (auto& t : shared) a.push_back(StepOf(t));  // with the KL term: the base path shares too
  for (auto& t : unshared) b.push_back(StepOf(t));
  const auto ra = MultiTenantStep(model, a, /*share_prompts=*/true);
  const auto rb = MultiTenantStep(model, b, /*share_prompts=*/false);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_NEAR(ra[k].loss, rb[k].loss, 1e-5) << k;
    EXPECT_NEAR(ra[k].grad_norm, rb[k].grad_norm, 1e-4 * std::max(1.0, rb[k].grad_norm)) << k;
    EXPECT_EQ(ra[k].tokens, rb[k].tokens) << k;
    // Gradients within rounding (measured: 1.4e-7 of a largest element of 0.12). The updates
    // within 1e-5, a thousandth of the step (lr 1e-2): AdamW's first step is lr·g/(|g| + eps),
    // which turns the rounding of an element with |g| near eps into up to ~1e-6 (measured).
    const auto& ga = shared[k].adapter->flat().grad();
    const auto& gb = unshared[k].adapter->flat().grad();
    EXPECT_LT((ga - gb).abs().max().item<double>(), 1e-5 * gb.abs().max().item<double>())
        << "tenant " << k;
    const double diff =
        (shared[k].adapter->flat() - unshared[k].adapter->flat()).abs().max().item<double>();
    EXPECT_LT(diff, 1e-5) << "tenant " << k;
  }
  EXPECT_LT(ra[0].padded_tokens, rb[0].padded_tokens);
  EXPECT_LT(ra[1].own_padded_tokens, rb[1].own_padded_tokens);
  EXPECT_EQ(ra[2].own_padded_tokens, rb[2].own_padded_tokens);  // nothing to share
  // One prefix row a group, its positions part of the tenant's own padded ones.
  EXPECT_EQ(ra[0].own_prefix_rows, 2);
  EXPECT_EQ(ra[1].own_prefix_rows, 3);
  EXPECT_GT(ra[0].own_prefix_tokens, 2 * 4);  // prompts of 6-20 tokens, less the last
  EXPECT_LT(ra[0].own_prefix_tokens, ra[0].own_padded_tokens);
  EXPECT_EQ(ra[2].own_prefix_rows, 0);
  EXPECT_EQ(rb[0].own_prefix_rows, 0);
  EXPECT_EQ(rb[0].own_prefix_tokens, 0);
  EXPECT_GT(ra[0].grad_norm, 0);
}

// A step's degenerate groups (advantage 0) are left out with their tokens counted: the step is
// the one that trains them too (GRPO's mean over the whole batch), and not the larger one of the
// informative rows alone.
TEST(MultiTenantStepTest, LeftOutZeroAdvantageRowsStillCountInTheMean) {
  auto w = *model::BaseWeights::Load(kData + "/llama");
  model::Transformer model(w);
  const uint32_t all = (1u << kNumLoraTargets) - 1;
  Tenant full = MakeTenant(*w, 4, all, 5, 6, 1.0f), kept = MakeTenant(*w, 4, all, 5, 6, 1.0f),
         alone = MakeTenant(*w, 4, all, 5, 6, 1.0f);
  int64_t zero_tokens = 0;
  for (size_t i = 3; i < 6; ++i) {  // the last three rows: a degenerate group
    full.completions[i].advantage = 0;
    for (uint8_t m : full.completions[i].loss_mask) zero_tokens += m;
  }
  for (Tenant* t : {&kept, &alone}) t->completions.resize(3);
  for (size_t i = 0; i < 3; ++i) ASSERT_NE(full.completions[i].advantage, 0.0f) << i;
  std::vector<TenantStep> a = {StepOf(full)}, b = {StepOf(kept)}, c = {StepOf(alone)};
  for (auto* s : {&a, &b, &c}) (*s)[0].grpo.kl_beta = 0;  // the left-out rows' KL is not computed
  b[0].skipped_tokens = zero_tokens;
  const auto ra = MultiTenantStep(model, a), rb = MultiTenantStep(model, b),
             rc = MultiTenantStep(model, c);
  EXPECT_NEAR(ra[0].loss, rb[0].loss, 1e-6);
  EXPECT_NEAR(ra[0].grad_norm, rb[0].grad_norm, 1e-5 * rb[0].grad_norm);
  // AdamW's first step is about lr·sign(g) (lr 1e-2 here), so rounding in the smallest gradients
  // shows at 1e-6; a different gradient scale would not change it either, hence the norms above.
  EXPECT_LT((full.adapter->flat() - kept.adapter->flat()).abs().max().item<double>(), 1e-5);
  // Without the count, the informative rows' gradient is scaled up by all / their tokens.
  ASSERT_GT(zero_tokens, 0);
  EXPECT_NEAR(rc[0].grad_norm / rb[0].grad_norm, double(rb[0].tokens + zero_tokens) / rb[0].tokens,
              1e-3);
}

// A tenant whose gradient is not finite (here: behaviour log-probs so low that the ratio
// overflows, with a negative advantage) is not updated, and the tenant it shares the step with
// is updated exactly as beside a finite one of the same shapes.
TEST(MultiTenantStepTest, ATenantWhoseGradientIsNotFiniteIsNotUpdatedAndTheOthersAre) {
  auto w = *model::BaseWeights::Load(kData + "/llama");
  model::Transformer model(w);
  const uint32_t all = (1u << kNumLoraTargets) - 1;
  Tenant good = MakeTenant(*w, 4, all, 21, 3, 1.0f), bad = MakeTenant(*w, 4, all, 22, 3, 1.0f);
  // The same two tenants with a finite second one: the same shapes, batches and padding.
  Tenant good2 = MakeTenant(*w, 4, all, 21, 3, 1.0f), finite = MakeTenant(*w, 4, all, 22, 3, 1.0f);
  for (Completion& c : bad.completions) {
    c.advantage = -1.0f;
    for (size_t i = 0; i < c.tokens.size(); ++i)
      if (c.loss_mask[i]) c.behaviour_logprobs[i] = -1e4f;
  }
  const torch::Tensor bad_before = bad.adapter->flat().detach().clone();
  const torch::Tensor good_before = good.adapter->flat().detach().clone();
  std::vector<TenantStep> steps = {StepOf(good), StepOf(bad)};
  const auto results = MultiTenantStep(model, steps);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[1].not_finite);
  EXPECT_FALSE(std::isfinite(results[1].grad_norm));
  EXPECT_TRUE(torch::equal(bad.adapter->flat(), bad_before));
  EXPECT_FALSE(results[0].not_finite);
  EXPECT_FALSE(torch::equal(good.adapter->flat(), good_before));
  EXPECT_TRUE(torch::isfinite(good.adapter->flat()).all().item<bool>());
  for (Completion& c : finite.completions) c.advantage = -1.0f;
  std::vector<TenantStep> beside_finite = {StepOf(good2), StepOf(finite)};
  MultiTenantStep(model, beside_finite);
  EXPECT_TRUE(torch::equal(good.adapter->flat(), good2.adapter->flat()));
}

// One tenant's failure is its own: a shared step that throws (here: a token outside the
// vocabulary in one tenant's rows) is retried tenant by tenant; the good tenant ends exactly as
// alone, the bad one unchanged with the reason.
TEST(MultiTenantStepTest, IsolatedStepsFailOnlyTheTenantThatFailsAlone) {
  auto w = *model::BaseWeights::Load(kData + "/llama");
  model::Transformer model(w);
  const uint32_t all = (1u << kNumLoraTargets) - 1;
  Tenant good = MakeTenant(*w, 4, all, 31, 3, 1.0f), bad = MakeTenant(*w, 4, all, 32, 3, 1.0f);
  Tenant alone = MakeTenant(*w, 4, all, 31, 3, 1.0f);
  bad.completions[1].tokens.back() = int32_t(w->config.vocab_size);
  const torch::Tensor bad_before = bad.adapter->flat().detach().clone();
  std::vector<TenantStep> steps = {StepOf(good), StepOf(bad)};
  EXPECT_ANY_THROW(MultiTenantStep(model, steps));  // shared, it fails for both
  good = MakeTenant(*w, 4, all, 31, 3, 1.0f);
  steps = {StepOf(good), StepOf(bad)};
  int retries = 0;  // each tenant's step alone reports progress
  const IsolatedSteps done =
      MultiTenantStepIsolated(model, steps, /*share_prompts=*/true, [&] { ++retries; });
  EXPECT_EQ(retries, 2);
  ASSERT_EQ(done.failed.size(), 2u);
  EXPECT_EQ(done.failed[0], "");
  EXPECT_NE(done.failed[1].find("training step failed"), std::string::npos) << done.failed[1];
  // LibTorch's message without its C++ backtrace (model/torch_error.h): the reason, not frames.
  EXPECT_EQ(done.failed[1].find("frame #"), std::string::npos) << done.failed[1];
  EXPECT_FALSE(done.out_of_memory[1]);  // the input's fault: no retrying makes it fit
  EXPECT_TRUE(torch::equal(bad.adapter->flat(), bad_before));
  std::vector<TenantStep> one = {StepOf(alone)};
  MultiTenantStep(model, one);
  EXPECT_TRUE(torch::equal(good.adapter->flat(), alone.adapter->flat()));
  EXPECT_GT(done.results[0].grad_norm, 0);
}

// Memory running out is told apart from a tenant's bad input (the trainer lets it pass twice): a
// step under an address-space limit fails as out of memory; the bad token above does not.
TEST(MultiTenantStepTest, AStepThatRunsOutOfMemorySaysSo) {
  EXPECT_TRUE(model::IsOutOfMemory(std::bad_alloc()));
  EXPECT_FALSE(model::IsOutOfMemory(std::runtime_error("index 300 is out of bounds")));
  const pid_t child = testing::ForkChild([]() -> int {
    // One thread, as in the stages: OpenBLAS's own threads spin forever on a failed allocation.
    model::SetComputeThreads(1);
    auto w = *model::BaseWeights::Load(kData + "/llama");
    model::Transformer model(w);
    // A small step first: OpenBLAS takes its 128 MiB buffer at its first product, and retries a
    // failed one for ever.
    Tenant small = MakeTenant(*w, 4, (1u << kNumLoraTargets) - 1, 40, 2, 1.0f);
    std::vector<TenantStep> warm = {StepOf(small)};
    MultiTenantStep(model, warm);
    Tenant big = MakeTenant(*w, 4, (1u << kNumLoraTargets) - 1, 41, 64, 1.0f, /*extra=*/400);
    std::vector<TenantStep> steps = {StepOf(big)};
    // What is mapped now and 32 MiB more: far less than this step's activations.
    if (!testing::LimitAddressSpaceToMappedPlus(0, 32 << 10)) return 2;
    const IsolatedSteps done = MultiTenantStepIsolated(model, steps);
    if (done.failed[0].empty()) return 3;  // it fit
    if (!done.out_of_memory[0]) {
      std::fprintf(stderr, "not out of memory: %s\n", done.failed[0].c_str());
      return 4;
    }
    return 0;
  });
  const testing::ChildExit e = testing::WaitChildFor(child, 120);
  EXPECT_TRUE(e.exited && e.code == 0) << "exit " << e.code << " signal " << e.signal;
}

// One tenant, one completion with positive advantage: steps raise its log-probability.
TEST(MultiTenantStepTest, PositiveAdvantageRaisesTheCompletionsLogProb) {
  auto w = *model::BaseWeights::Load(kData + "/llama");
  model::Transformer model(w);
  Tenant t = MakeTenant(*w, 4, (1u << kNumLoraTargets) - 1, 9, 1, 1.0f);
  t.completions[0].advantage = 1.0f;
  ASSERT_EQ(t.temperature, 1.0f);
  // The current adapter's log-prob of each token given those before it (temperature 1); 0 at
  // positions that are not trained.
  auto token_logprobs = [&] {
    torch::NoGradGuard g;
    model::LoraRouting r{{t.adapter.get()}, {0}};
    const auto& c = t.completions[0];
    auto ids = torch::tensor(std::vector<int64_t>(c.tokens.begin(), c.tokens.end())).unsqueeze(0);
    auto lp = torch::log_softmax(model.Forward(ids, &r)[0], -1);
    std::vector<float> out(c.tokens.size(), 0.0f);
    for (size_t i = 1; i < c.tokens.size(); ++i)
      if (c.loss_mask[i]) out[i] = lp[int64_t(i) - 1][c.tokens[i]].item<float>();
    return out;
  };
  auto logprob = [&] {
    double s = 0;
    for (float x : token_logprobs()) s += x;
    return s;
  };
  const double before = logprob();
  for (int i = 0; i < 5; ++i) {
    // On-policy: record the current log-probs as behaviour, as the rollout would.
    Completion& c = t.completions[0];
    ASSERT_EQ(c.loss_mask[0], 0);  // position 0 has no preceding token to predict it
    const std::vector<float> current = token_logprobs();
    for (size_t j = 0; j < c.tokens.size(); ++j)
      if (c.loss_mask[j]) c.behaviour_logprobs[j] = current[j];
    std::vector<TenantStep> steps = {StepOf(t)};
    steps[0].grpo.kl_beta = 0;
    MultiTenantStep(model, steps);
  }
  EXPECT_GT(logprob(), before + 0.5);
}

// The importance ratio is 1 on-policy: the log-probs the rollout's generator records while it
// samples (temperature 0.7, top-k, top-p; with a tool's result appended mid-way and generation
// going on after it, as the rollout does) are those the trainer computes for the same adapter.
// Checked per token against a plain forward of the whole sequence, and through the step: every
// ratio 1 makes the loss -(sum of A x generated tokens) / generated tokens, with nothing clipped.
// At the wrong temperature the same step clips and its loss moves (the check can fail).
TEST(MultiTenantStepTest, TheRolloutsLogProbsAreTheTrainersAtTheSameAdapter) {
  auto w = *model::BaseWeights::Load(kData + "/llama");
  model::Transformer model(w);
  Tenant t = MakeTenant(*w, 8, (1u << kNumLoraTargets) - 1, 21, 0, 0.7f);
  std::shared_ptr<const model::LoraAdapter> adapter(t.adapter.get(),
                                                    [](const model::LoraAdapter*) {});
  const int vocab = w->config.vocab_size;
  std::mt19937 rng(4);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 7; ++i) prompt.push_back(int32_t(rng() % uint32_t(vocab)));
  model::SamplingParams sampling;
  sampling.temperature = 0.7f;
  sampling.top_k = 40;
  sampling.top_p = 0.9f;
  auto generate = [&](const std::vector<int32_t>& context, uint64_t seed, int n) {
    torch::NoGradGuard no_grad;
    model::Generator gen(model);
    model::GenerationRequest r;
    r.id = 1;
    r.prompt = context;
    r.adapter = adapter;
    r.sampling = sampling;
    r.seed = seed;
    r.max_new_tokens = n;
    gen.Add(r);
    model::GenerationResult out;
    while (gen.active() > 0)
      for (auto& done : gen.Step()) out = done;
    return out;
  };
  std::vector<Completion> completions;
  const float advantages[] = {1.0f, -0.5f, 0.25f, -0.75f};
  for (int i = 0; i < 4; ++i) {
    Completion c;
    c.tokens = prompt;
    c.behaviour_logprobs.assign(prompt.size(), 0.0f);
    c.loss_mask.assign(prompt.size(), 0);
    auto append = [&](const model::GenerationResult& g) {
      ASSERT_EQ(g.tokens.size(), g.logprobs.size());
      c.tokens.insert(c.tokens.end(), g.tokens.begin(), g.tokens.end());
      c.behaviour_logprobs.insert(c.behaviour_logprobs.end(), g.logprobs.begin(), g.logprobs.end());
      c.loss_mask.insert(c.loss_mask.end(), g.tokens.size(), 1);
    };
    append(generate(c.tokens, 100 + uint64_t(i), 6));
    for (int k = 0; k < 3; ++k) {  // a tool's result: not the policy's, not trained on
      c.tokens.push_back(int32_t(rng() % uint32_t(vocab)));
      c.behaviour_logprobs.push_back(0.0f);
      c.loss_mask.push_back(0);
    }
    append(generate(c.tokens, 200 + uint64_t(i), 5));
    c.advantage = advantages[i];
    completions.push_back(c);
  }
  // A plain reference: log softmax(logits / T) of the whole sequence at each generated token.
  {
    torch::NoGradGuard no_grad;
    model::LoraRouting r{{t.adapter.get()}, {0}};
    for (const Completion& c : completions) {
      auto ids = torch::tensor(std::vector<int64_t>(c.tokens.begin(), c.tokens.end())).unsqueeze(0);
      auto lp = torch::log_softmax(model.Forward(ids, &r)[0] / 0.7, -1);
      for (size_t j = 1; j < c.tokens.size(); ++j) {
        if (!c.loss_mask[j]) continue;
        EXPECT_NEAR(c.behaviour_logprobs[j], lp[int64_t(j) - 1][c.tokens[j]].item<double>(), 1e-4)
            << "token " << j;
      }
    }
  }
  double want = 0, tokens = 0;
  for (const Completion& c : completions) {
    for (uint8_t m : c.loss_mask) {
      want -= m * c.advantage;
      tokens += m;
    }
  }
  want /= tokens;
  auto step_at = [&](float temperature) {
    Tenant copy = MakeTenant(*w, 8, (1u << kNumLoraTargets) - 1, 21, 0, temperature);
    copy.completions = completions;
    std::vector<TenantStep> steps = {StepOf(copy)};
    steps[0].grpo.kl_beta = 0;
    return MultiTenantStep(model, steps)[0];
  };
  const TenantStepResult on_policy = step_at(0.7f);
  EXPECT_NEAR(on_policy.loss, want, 1e-4);
  EXPECT_EQ(on_policy.clip_fraction, 0.0);
  EXPECT_EQ(on_policy.tokens, int64_t(tokens));
  const TenantStepResult wrong = step_at(1.0f);
  EXPECT_GT(std::abs(wrong.loss - want), 1e-3);
  EXPECT_GT(wrong.clip_fraction, 0.0);
}

}  // namespace
}  // namespace marlaas::rl

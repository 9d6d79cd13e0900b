// Generation: KV-cache steps against full recomputation, continuous batching independence and
// behaviour log-probs (the sampler itself: sampler_test.cc).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <random>

#include "model/compute_threads.h"
#include "model/generator.h"
#include "model/sampler.h"
#include "model/torch_error.h"
#include "model/transformer.h"
#include "tests/test_util.h"

namespace marlaas::model {
namespace {

const std::string kData = MARLAAS_TEST_DATA_DIR;

std::shared_ptr<LoraAdapter> RandomAdapter(const BaseWeights& w, uint32_t rank, uint64_t seed) {
  auto a = LoraAdapter::Create(w, rank, 8.0f, (1u << kNumLoraTargets) - 1, seed);
  TORCH_CHECK(a.ok(), a.status().ToString());  // throws: the test fails, nothing dereferenced
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  a->flat().normal_(0, 0.2);
  return std::make_shared<LoraAdapter>(std::move(*a));
}

std::vector<int64_t> RandomTokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int64_t(rng() % uint32_t(vocab));
  return t;
}

// Property: at every step, the logits of the cached incremental forward equal those of a full
// forward over the whole sequence so far, for rows that join mid-way with their own prompt
// lengths and adapters while others decode, and leave (freeing their cache) before others join.
// With caches in one shared KvArena (GetParam) the decoding rows attend as one batch: started
// with two slots of two positions, it grows both while rows run, and a row that joins late takes
// a released slot whose stale keys lie beyond its length.
class KvCacheStepTest : public ::testing::TestWithParam<bool> {};

TEST_P(KvCacheStepTest, StepsEqualFullRecomputeAtEveryStep) {
  const bool shared_arena = GetParam();
  auto w = *BaseWeights::Load(kData + "/llama");
  ASSERT_GT(w->config.num_heads, w->config.num_kv_heads);  // grouped-query attention is covered
  Transformer model(w);
  std::mt19937 rng(51);
  auto a0 = RandomAdapter(*w, 4, 1), a1 = RandomAdapter(*w, 7, 2);
  const int vocab = w->config.vocab_size;
  auto arena = std::make_shared<KvArena>(w->config, torch::kCPU, 2, 2);
  struct Row {
    std::vector<int64_t> seq;
    std::unique_ptr<KvCache> cache;
    int32_t adapter;
    int join_step, leave_step;
  };
  std::vector<Row> rows;
  const int prompt_len[] = {5, 1, 9, 3, 2, 4};
  const int32_t adapter_of[] = {0, -1, 1, 0, 1, -1};
  const int join_at[] = {0, 0, 2, 4, 7, 7};
  const int leave_at[] = {12, 6, 12, 12, 12, 12};
  for (int r = 0; r < 6; ++r)
    rows.push_back(
        {RandomTokens(rng, prompt_len[r], vocab), nullptr, adapter_of[r], join_at[r], leave_at[r]});
  torch::NoGradGuard no_grad;
  for (int step = 0; step < 12; ++step) {
    std::vector<torch::Tensor> inputs;
    std::vector<KvCache*> caches;
    LoraRouting routing{{a0.get(), a1.get()}, {}};
    std::vector<Row*> active;
    for (auto& row : rows) {
      if (step == row.leave_step) row.cache.reset();
      if (step < row.join_step || step >= row.leave_step) continue;
      if (row.cache == nullptr) {
        row.cache = shared_arena ? std::make_unique<KvCache>(arena)
                                 : std::make_unique<KvCache>(w->config, 2);
      }
      const bool joining = row.cache->length() == 0;
      std::vector<int64_t> in = joining ? row.seq : std::vector<int64_t>{row.seq.back()};
      inputs.push_back(torch::tensor(in, torch::kInt64));
      caches.push_back(row.cache.get());
      routing.row_adapter.push_back(row.adapter);
      active.push_back(&row);
    }
    auto logits = model.Step(inputs, caches, &routing);
    for (size_t b = 0; b < active.size(); ++b) {
      Row& row = *active[b];
      LoraRouting one{{a0.get(), a1.get()}, {row.adapter}};
      auto full = model.Forward(torch::tensor(row.seq, torch::kInt64).unsqueeze(0), &one);
      auto want = full[0][int64_t(row.seq.size()) - 1];
      EXPECT_LT((logits[int64_t(b)] - want).abs().max().item<double>(), 1e-4)
          << "step " << step << " row " << b;
      EXPECT_EQ(row.cache->length(), int64_t(row.seq.size()));
      row.seq.push_back(logits[int64_t(b)].argmax().item<int64_t>());
    }
  }
  if (shared_arena) {
    EXPECT_GE(arena->slots(), 4);      // grew from 2: four rows ran at once
    EXPECT_GE(arena->capacity(), 16);  // grew from 2 positions
    EXPECT_EQ(arena->in_use(), 5);     // row 1 released its slot
  }
}

INSTANTIATE_TEST_SUITE_P(CacheLayouts, KvCacheStepTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "SharedArena" : "OwnCaches"; });

// Property: a KvArena hands out distinct slots, reuses released ones, refuses a double release,
// and keeps every slot's contents when it grows in slots or positions.
TEST(KvArenaTest, SlotsAreDistinctReusedAndKeptAcrossGrowth) {
  auto w = *BaseWeights::Load(kData + "/llama");
  KvArena arena(w->config, torch::kCPU, 1, 2);
  const int64_t a = arena.Acquire();
  arena.keys(0).select(0, a).fill_(3.0f);
  const int64_t b = arena.Acquire();  // grows to two slots
  EXPECT_NE(a, b);
  EXPECT_EQ(arena.slots(), 2);
  arena.Reserve(5);  // grows positions, at least doubling
  EXPECT_GE(arena.capacity(), 5);
  EXPECT_TRUE(arena.keys(0).select(0, a).narrow(1, 0, 2).eq(3.0f).all().item<bool>());
  arena.Release(a);
  EXPECT_THROW(arena.Release(a), c10::Error);
  EXPECT_THROW(arena.Release(7), c10::Error);
  EXPECT_EQ(arena.Acquire(), a);
  EXPECT_EQ(arena.in_use(), 2);
}

// Property: positions no row has written hold zeros, also after growth. A decoding row reads up
// to the longest row's length with the rest masked to weight 0, and 0 times leftover inf or NaN
// (freed memory of a masked score tensor) is NaN: with uninitialised memory a decode step once
// returned NaN logits after a training step had run in the same process.
TEST(KvArenaTest, PositionsNoRowWroteAreZeroAlsoAfterGrowth) {
  auto w = *BaseWeights::Load(kData + "/llama");
  for (int i = 0; i < 4; ++i) {
    // Leave freed memory full of -inf for the allocator to hand out again.
    auto junk = torch::full({1 << 16}, -std::numeric_limits<float>::infinity());
  }
  KvArena arena(w->config, torch::kCPU, 1, 2);
  auto zero = [&] {
    for (int l = 0; l < w->config.num_layers; ++l)
      if (!arena.keys(l).eq(0).all().item<bool>() || !arena.values(l).eq(0).all().item<bool>())
        return false;
    return true;
  };
  EXPECT_TRUE(zero());
  const int64_t a = arena.Acquire();
  (void)arena.Acquire();  // grows in slots
  arena.Reserve(9);       // and in positions
  (void)a;
  EXPECT_TRUE(zero());
}

// Property: moving a KvCache moves its slot (one release, by the last owner).
// Growth that runs out of memory part way through the layers (a real address-space limit, in a
// child: room for about one new layer) throws and leaves the arena whole: every layer of its old
// shape, every cache's keys and values as they were, and the arena usable after.
TEST(KvArenaTest, GrowthThatRunsOutOfMemoryPartWayLeavesTheArenaWhole) {
  const pid_t child = testing::ForkChild([]() -> int {
    ModelConfig c;
    c.num_layers = 6;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    auto arena = std::make_shared<KvArena>(c, torch::kCPU, 4, 256);
    KvCache a(arena), b(arena);
    torch::manual_seed(3);
    std::vector<torch::Tensor> ka, vb;
    for (int l = 0; l < c.num_layers; ++l) {
      ka.push_back(torch::randn({2, 100, 64}));
      vb.push_back(torch::randn({2, 200, 64}));
      a.Append(l, ka.back(), ka.back());
      b.Append(l, vb.back(), vb.back());
    }
    a.Commit(100);
    b.Commit(200);
    // A new layer at 4096 positions is 4 slots x 2 heads x 4096 x 64 floats = 8 MiB: room for
    // about one and a half.
    unsigned long long before = 0;
    if (!testing::LimitAddressSpaceToMappedPlus(0, 12 * 1024, &before)) return 2;
    bool threw = false;
    try {
      arena->Reserve(4096);
    } catch (const std::exception& e) {
      threw = IsOutOfMemory(e);
    }
    testing::SetSoftAddressSpaceLimit(0, before);
    if (!threw) return 3;
    if (arena->capacity() != 256 || arena->slots() != 4) return 4;
    for (int l = 0; l < c.num_layers; ++l) {
      if (arena->keys(l).sizes() != torch::IntArrayRef({4, 2, 256, 64})) return 5;
      if (!torch::equal(a.Keys(l, 0), ka[size_t(l)]) ||
          !torch::equal(b.Values(l, 0), vb[size_t(l)]))
        return 6;
    }
    arena->Reserve(1024);  // with memory back, it grows, and the contents come along
    for (int l = 0; l < c.num_layers; ++l)
      if (!torch::equal(b.Keys(l, 0), vb[size_t(l)]) || arena->values(l).size(2) != 1024) return 7;
    return 0;
  });
  const testing::ChildExit e = testing::WaitChildFor(child, 60);
  EXPECT_TRUE(e.exited && e.code == 0) << "exit " << e.code << " signal " << e.signal;
}

TEST(KvArenaTest, MovedCachesReleaseTheirSlotOnce) {
  auto w = *BaseWeights::Load(kData + "/llama");
  auto arena = std::make_shared<KvArena>(w->config, torch::kCPU, 2, 2);
  {
    std::vector<KvCache> caches;
    for (int i = 0; i < 5; ++i) caches.emplace_back(arena);  // reallocations move them
    EXPECT_EQ(arena->in_use(), 5);
    KvCache moved = std::move(caches[0]);
    EXPECT_EQ(moved.slot(), 0);
    EXPECT_EQ(arena->in_use(), 5);
  }
  EXPECT_EQ(arena->in_use(), 0);
}

std::vector<int32_t> Prompt(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& x : p) x = int32_t(rng() % uint32_t(vocab));
  return p;
}

// Property: with fixed seeds, a sequence samples the same tokens (and log-probs) whether it runs
// alone or in a batch that others join and leave.
// Property: sequences that join with one prompt and adapter (a GRPO group) are prefilled once,
// and each samples exactly what it samples alone; another adapter or prompt is its own row.
TEST(GenerationTest, AGroupsPromptIsComputedOnceAndEachSequenceSamplesAsAlone) {
  auto w = *BaseWeights::Load(kData + "/llama");
  Transformer model(w);
  auto adapter = RandomAdapter(*w, 4, 5), other = RandomAdapter(*w, 4, 6);
  std::mt19937 rng(61);
  const auto prompt64 = RandomTokens(rng, 9, w->config.vocab_size);
  const std::vector<int32_t> prompt(prompt64.begin(), prompt64.end());
  std::vector<GenerationRequest> reqs;
  for (uint64_t i = 0; i < 6; ++i) {
    GenerationRequest r;
    r.id = i + 1;
    r.prompt = prompt;
    r.adapter = i == 4 ? other : adapter;  // request 5: same prompt, another adapter
    if (i == 5) r.prompt.back() = (r.prompt.back() + 1) % w->config.vocab_size;  // another prompt
    r.seed = 100 + i;
    r.max_new_tokens = 7;
    reqs.push_back(r);
  }
  Generator together(model);
  for (const auto& r : reqs) together.Add(r);
  std::map<uint64_t, GenerationResult> got;
  bool first = true;
  while (together.active() > 0) {
    for (auto& r : together.Step()) got[r.id] = r;
    if (first) {
      // Computed: the group's prompt once, the other adapter's, the other prompt; six sequences.
      EXPECT_EQ(together.last_step().rows, 6u);
      EXPECT_EQ(together.last_step().tokens, 3 * prompt.size());
      first = false;
    }
  }
  ASSERT_EQ(got.size(), reqs.size());
  for (const auto& r : reqs) {
    Generator alone(model);
    alone.Add(r);
    GenerationResult want;
    while (alone.active() > 0)
      for (auto& d : alone.Step()) want = d;
    EXPECT_EQ(got[r.id].tokens, want.tokens) << "request " << r.id;
    ASSERT_EQ(got[r.id].logprobs.size(), want.logprobs.size());
    for (size_t k = 0; k < want.logprobs.size(); ++k)
      EXPECT_NEAR(got[r.id].logprobs[k], want.logprobs[k], 1e-4) << r.id << " token " << k;
  }
  // The group's sequences sampled different continuations (their own seeds).
  EXPECT_NE(got[1].tokens, got[2].tokens);
}

TEST(GenerationTest, SampledTokensDoNotDependOnBatchCompanions) {
  auto w = *BaseWeights::Load(kData + "/llama");
  Transformer model(w);
  auto adapter = RandomAdapter(*w, 4, 3), other = RandomAdapter(*w, 8, 4);
  std::mt19937 rng(61);
  const int vocab = w->config.vocab_size;
  GenerationRequest target;
  target.id = 7;
  target.prompt = Prompt(rng, 6, vocab);
  target.adapter = adapter;
  target.seed = 1234;
  target.max_new_tokens = 20;
  target.sampling.top_k = 50;
  target.sampling.top_p = 0.95f;

  auto run_alone = [&] {
    Generator g(model);
    g.Add(target);
    std::vector<GenerationResult> out;
    while (g.active() > 0) {
      for (auto& r : g.Step()) out.push_back(r);
    }
    return out.at(0);
  };
  const GenerationResult alone = run_alone();
  ASSERT_EQ(alone.tokens.size(), 20u);

  Generator g(model);
  GenerationResult crowded;
  for (int step = 0, next_id = 100; g.active() > 0 || step == 0; ++step) {
    if (step == 0 || step == 3) {
      GenerationRequest r;
      r.id = uint64_t(next_id++);
      r.prompt = Prompt(rng, 1 + int(rng() % 10), vocab);
      r.adapter = step == 0 ? other : nullptr;
      r.seed = rng();
      r.max_new_tokens = 2 + int(rng() % 6);  // leaves early
      g.Add(r);
    }
    if (step == 2) g.Add(target);  // joins while others decode
    if (step == 5) {
      GenerationRequest r;
      r.id = uint64_t(next_id++);
      r.prompt = Prompt(rng, 4, vocab);
      r.adapter = adapter;  // same tenant, different sequence
      r.seed = 99;
      r.max_new_tokens = 30;
      g.Add(r);
    }
    for (auto& r : g.Step()) {
      if (r.id == 7) crowded = r;
    }
  }
  EXPECT_EQ(crowded.tokens, alone.tokens);
  ASSERT_EQ(crowded.logprobs.size(), alone.logprobs.size());
  for (size_t i = 0; i < alone.logprobs.size(); ++i) {
    EXPECT_NEAR(crowded.logprobs[i], alone.logprobs[i], 1e-4);
  }
}

// Every slot of the arena is as long as the longest sequence: once a long one has left, the
// arena gives those positions back (the short sequences' keys kept: they sample as alone); an
// idle generator keeps its arena until asked to release it.
TEST(GenerationTest, TheKvArenaShrinksOnceALongSequenceHasLeft) {
  auto w = *BaseWeights::Load(kData + "/llama");
  Transformer model(w);
  std::mt19937 rng(5);
  const int vocab = w->config.vocab_size;
  GenerationRequest shorter;
  shorter.id = 1;
  shorter.prompt = Prompt(rng, 5, vocab);
  shorter.seed = 17;
  shorter.max_new_tokens = 30;
  GenerationRequest longer;
  longer.id = 2;
  longer.prompt = Prompt(rng, 600, vocab);
  longer.seed = 18;
  longer.max_new_tokens = 2;
  Generator alone(model);
  alone.Add(shorter);
  GenerationResult expected;
  while (alone.active() > 0)
    for (auto& r : alone.Step()) expected = r;

  Generator g(model);
  g.Add(shorter);
  g.Add(longer);
  int64_t peak = 0;
  GenerationResult got;
  bool long_left = false;
  while (g.active() > 0) {
    for (auto& r : g.Step()) {
      if (r.id == 2) long_left = true;
      if (r.id == 1) got = r;
    }
    peak = std::max(peak, g.kv_arena().capacity());
    if (long_left && g.active() > 0) {
      EXPECT_LE(g.kv_arena().capacity(), 128) << "not trimmed";
    }
  }
  EXPECT_GE(peak, 600);
  EXPECT_TRUE(long_left);
  EXPECT_EQ(got.tokens, expected.tokens);
  ASSERT_EQ(got.logprobs.size(), expected.logprobs.size());
  for (size_t i = 0; i < got.logprobs.size(); ++i)
    EXPECT_NEAR(got.logprobs[i], expected.logprobs[i], 1e-4);
  EXPECT_EQ(g.kv_arena().capacity(), 64);  // the short one's need
  // A sequence of 100 positions that ends leaves its arena for the next round (a lockstep caller
  // is idle between every two rounds) ...
  GenerationRequest medium = longer;
  medium.prompt = Prompt(rng, 100, vocab);
  g.Add(medium);
  EXPECT_TRUE(g.Step().empty());
  g.ReleaseIdleMemory();  // ... a generator with a sequence keeps it ...
  EXPECT_GE(g.kv_arena().capacity(), 101);
  while (g.active() > 0) g.Step();
  const int64_t kept = g.kv_arena().capacity();
  EXPECT_GE(kept, 102);
  g.ReleaseIdleMemory();  // ... and one whose caller was idle for a while gives it back.
  EXPECT_EQ(g.kv_arena().capacity(), 64);
  EXPECT_EQ(g.kv_arena().slots(), 8);
}

TEST(GenerationTest, StopTokensEndASequenceAndAreReported) {
  auto w = *BaseWeights::Load(kData + "/llama");
  Transformer model(w);
  Generator g(model);
  GenerationRequest r;
  r.prompt = {5, 6, 7};
  r.sampling.greedy = true;
  r.max_new_tokens = 10;
  g.Add(r);
  GenerationResult first;
  while (g.active() > 0)
    for (auto& x : g.Step()) first = x;
  ASSERT_EQ(first.tokens.size(), 10u);
  EXPECT_FALSE(first.hit_stop);
  // Stop on the third greedy token: generation ends right there.
  r.stop_tokens = {first.tokens[2]};
  g.Add(r);
  GenerationResult second;
  while (g.active() > 0)
    for (auto& x : g.Step()) second = x;
  EXPECT_TRUE(second.hit_stop);
  EXPECT_LE(second.tokens.size(), 3u);
  EXPECT_EQ(second.tokens.back(), first.tokens[2]);
}

// A Step that runs out of memory (a real address-space limit, in a child) throws, has advanced no
// sequence and left the caches as they were; once memory is there again, every sequence (those
// decoding when it failed and those that were joining) samples exactly the tokens and log-probs
// of a run that never failed.
TEST(GenerationTest, AStepThatRunsOutOfMemoryChangesNothingTheSequencesSample) {
  const pid_t child = testing::ForkChild([]() -> int {
    SetComputeThreads(1);  // OpenBLAS's own threads spin on a failed allocation
    auto w = *BaseWeights::Load(kData + "/llama");
    Transformer model(w);
    auto adapter = RandomAdapter(*w, 4, 9);
    std::mt19937 rng(77);
    const int vocab = w->config.vocab_size;
    std::vector<GenerationRequest> early, late;
    for (uint64_t i = 0; i < 3; ++i) {  // decoding when the step fails
      GenerationRequest r;
      r.id = i + 1;
      r.prompt = Prompt(rng, 5, vocab);
      r.adapter = i == 1 ? nullptr : adapter;
      r.seed = 10 + i;
      r.max_new_tokens = 30;
      early.push_back(r);
    }
    for (uint64_t i = 0; i < 64; ++i) {  // joining in the step that fails: a large prefill
      GenerationRequest r;
      r.id = 100 + i;
      r.prompt = Prompt(rng, 100, vocab);
      r.adapter = adapter;
      r.seed = 1000 + i;
      r.max_new_tokens = 20;
      late.push_back(r);
    }
    // run(limit): the early ones, 4 steps, then the late ones join; with `limit`, the next step
    // runs under an address-space limit of what is mapped then. Returns the results by id and
    // how many steps failed (-1: a failure that was not memory).
    auto run = [&](bool limit, int* failed) {
      Generator g(model);
      std::map<uint64_t, GenerationResult> got;
      for (const auto& r : early) g.Add(r);
      for (int k = 0; k < 4; ++k)
        for (auto& d : g.Step()) got[d.id] = d;
      for (const auto& r : late) g.Add(r);
      *failed = 0;
      if (limit) {
        unsigned long long before = 0;
        if (!testing::LimitAddressSpaceToMappedPlus(0, 0, &before)) *failed = -2;
        try {
          for (auto& d : g.Step()) got[d.id] = d;
        } catch (const std::exception& e) {
          *failed = IsOutOfMemory(e) ? 1 : -1;
          if (*failed < 0) std::fprintf(stderr, "not out of memory: %s\n", e.what());
        }
        testing::SetSoftAddressSpaceLimit(0, before);
        // The arena is whole: every layer of the shape it says.
        const KvArena& a = g.kv_arena();
        for (int l = 0; l < a.layers(); ++l)
          if (a.keys(l).size(0) != a.slots() || a.values(l).size(2) != a.capacity()) *failed = -3;
      }
      while (g.active() > 0)
        for (auto& d : g.Step()) got[d.id] = d;
      return got;
    };
    int failed = 0;
    const auto want = run(false, &failed);
    const auto got = run(true, &failed);
    if (failed != 1) {
      std::fprintf(stderr, "the limited step: %d\n", failed);
      return failed == 0 ? 3 : 4;  // 3: it fit
    }
    if (got.size() != early.size() + late.size() || want.size() != got.size()) return 5;
    for (const auto& [id, r] : want) {
      const GenerationResult& o = got.at(id);
      if (o.tokens != r.tokens || o.logprobs.size() != r.logprobs.size()) {
        std::fprintf(stderr, "request %llu sampled other tokens\n", (unsigned long long)id);
        return 6;
      }
      for (size_t k = 0; k < r.logprobs.size(); ++k)
        if (std::fabs(o.logprobs[k] - r.logprobs[k]) > 1e-4) return 7;
    }
    return 0;
  });
  const testing::ChildExit e = testing::WaitChildFor(child, 180);
  EXPECT_TRUE(e.exited && e.code == 0) << "exit " << e.code << " signal " << e.signal;
}

// A removed sequence hands over what it generated so far and leaves the batch; added back with
// those tokens after its prompt, it continues as if never removed (greedy: the same tokens).
TEST(GenerationTest, ARemovedSequenceHandsOverItsTokensAndContinuesFromThem) {
  auto w = *BaseWeights::Load(kData + "/llama");
  Transformer model(w);
  auto adapter = RandomAdapter(*w, 4, 12);
  std::mt19937 rng(3);
  GenerationRequest a, b;
  a.id = 1;
  a.prompt = Prompt(rng, 6, w->config.vocab_size);
  a.adapter = adapter;
  a.sampling.greedy = true;
  a.max_new_tokens = 16;
  b = a;
  b.id = 2;
  b.prompt = Prompt(rng, 4, w->config.vocab_size);
  Generator whole(model);
  whole.Add(a);
  GenerationResult want;
  while (whole.active() > 0)
    for (auto& d : whole.Step()) want = d;
  ASSERT_EQ(want.tokens.size(), 16u);

  Generator g(model);
  g.Add(a);
  g.Add(b);
  for (int k = 0; k < 5; ++k) ASSERT_TRUE(g.Step().empty());
  EXPECT_EQ(g.ActiveIds(), (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(g.Remove(3).has_value());
  std::optional<GenerationResult> part = g.Remove(1);
  ASSERT_TRUE(part.has_value());
  EXPECT_EQ(part->id, 1u);
  EXPECT_FALSE(part->hit_stop);
  ASSERT_EQ(part->tokens.size(), 5u);
  EXPECT_EQ(part->logprobs.size(), 5u);
  EXPECT_EQ(g.ActiveIds(), (std::vector<uint64_t>{2}));
  EXPECT_EQ(g.kv_arena().in_use(), 1);  // its slot went back
  GenerationRequest rest = a;
  rest.prompt.insert(rest.prompt.end(), part->tokens.begin(), part->tokens.end());
  rest.max_new_tokens = 11;
  g.Add(rest);
  GenerationResult tail;
  while (g.active() > 0)
    for (auto& d : g.Step())
      if (d.id == 1) tail = d;
  std::vector<int32_t> joined = part->tokens;
  joined.insert(joined.end(), tail.tokens.begin(), tail.tokens.end());
  EXPECT_EQ(joined, want.tokens);
}

}  // namespace
}  // namespace marlaas::model

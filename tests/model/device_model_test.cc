// The pieces the model needs to run on a GPU, checked on the CPU: the packed base (one block,
// views into it) computes exactly what the loaded base computes; the LoraPool stacks hold each
// resident adapter's A and Bᵀ, zero elsewhere, across growth and slot reuse; device names parse
// and a CUDA device is refused by a CPU-only LibTorch with a reason; adapters move between
// devices and wrap flat tensors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "base/device_name.h"
#include "model/device.h"
#include "model/device_base.h"
#include "model/generator.h"
#include "model/lora_pool.h"
#include "model/packed_weights.h"
#include "model/transformer.h"
#include "tests/torch_test_util.h"

namespace marlaas::model {
namespace {

using ::marlaas::testing::MaxAbsDiff;

ModelConfig SmallConfig(bool tied, bool bias) {
  ModelConfig c;
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.tie_word_embeddings = tied;
  c.qkv_bias = bias;
  return c;
}

std::shared_ptr<const LoraAdapter> RandomAdapter(const BaseWeights& w, uint32_t rank, uint32_t mask,
                                                 uint64_t seed) {
  auto a = LoraAdapter::Create(w, rank, 2.0f * float(rank), mask, seed);
  TORCH_CHECK(a.ok(), a.status().ToString());  // throws: the test fails, nothing dereferenced
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  a->flat().normal_(0, 0.05, gen);  // B non-zero too, so the adapter changes the output
  return std::make_shared<const LoraAdapter>(std::move(*a));
}

class PackedWeightsTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(PackedWeightsTest, ViewsOfTheBlockComputeWhatTheWeightsCompute) {
  const auto [tied, bias] = GetParam();
  auto w = BaseWeights::Random(SmallConfig(tied, bias), 7);
  if (bias) {  // non-zero biases, so a missing one would show
    torch::NoGradGuard no_grad;
    for (auto& L : w->layers) L.q_bias.normal_(0, 0.1);
  }
  const PackedLayout layout = PackLayout(*w);
  // Every tensor once (a tied lm_head is the embedding), aligned, inside the block, no overlap.
  EXPECT_EQ(layout.tensors.size(), w->NamedTensors().size());
  uint64_t end = 0;
  for (const PackedTensor& p : layout.tensors) {
    EXPECT_EQ(p.offset % kPackedAlignment, 0u) << p.name;
    EXPECT_GE(p.offset, end) << p.name;
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    end = p.offset + uint64_t(n) * sizeof(float);
  }
  EXPECT_LE(end, layout.bytes);
  EXPECT_EQ(tied, !std::count_if(layout.tensors.begin(), layout.tensors.end(),
                                 [](const PackedTensor& p) { return p.name == "lm_head.weight"; }));

  auto block = std::shared_ptr<float>(
      static_cast<float*>(std::aligned_alloc(kPackedAlignment, layout.bytes)), std::free);
  ASSERT_TRUE(CopyPacked(*w, layout, block.get(), torch::kCPU).ok());
  auto viewed = ViewPacked(w->config, layout, block.get(), torch::kCPU, block);
  ASSERT_TRUE(viewed.ok()) << viewed.status().ToString();
  for (const auto& [name, t] : (*viewed)->NamedTensors()) {  // views into the block, no copies
    const char* p = static_cast<const char*>(t.data_ptr());
    const char* b = reinterpret_cast<const char*>(block.get());
    EXPECT_TRUE(p >= b && p + t.numel() * sizeof(float) <= b + layout.bytes) << name;
  }
  EXPECT_EQ(tied, (*viewed)->lm_head.data_ptr() == (*viewed)->embed.data_ptr());

  Transformer original(w), packed(*viewed);
  auto adapter = RandomAdapter(*w, 4, (1u << kNumLoraTargets) - 1, 3);
  auto tokens = torch::randint(0, 50, {3, 9}, torch::kInt64);
  LoraRouting routing{{adapter.get()}, {0, -1, 0}};
  torch::NoGradGuard no_grad;
  EXPECT_EQ(MaxAbsDiff(original.Forward(tokens, &routing), packed.Forward(tokens, &routing)), 0);
  // PackOnDevice: the same, in a block of its own.
  auto own = PackOnDevice(*w, torch::kCPU);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_NE((*own)->embed.data_ptr(), w->embed.data_ptr());
  EXPECT_EQ(
      MaxAbsDiff(Transformer(*own).Forward(tokens, &routing), original.Forward(tokens, &routing)),
      0);
}

INSTANTIATE_TEST_SUITE_P(TiedAndBias, PackedWeightsTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(PackedWeightsTest, ALayoutOfAnotherModelIsRefusedByName) {
  auto small = BaseWeights::Random(SmallConfig(false, false), 1);
  ModelConfig wider = SmallConfig(false, false);
  wider.intermediate_size = 64;
  auto other = BaseWeights::Random(wider, 1);
  const PackedLayout layout = PackLayout(*small);
  std::vector<float> block(layout.bytes / sizeof(float) + 64);
  Status st = CopyPacked(*other, layout, block.data(), torch::kCPU);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("mlp"), std::string::npos) << st.ToString();
  auto viewed = ViewPacked(wider, layout, block.data(), torch::kCPU, nullptr);
  ASSERT_FALSE(viewed.ok());
  EXPECT_NE(viewed.status().message().find("the config implies"), std::string::npos)
      << viewed.status().ToString();
}

// The slot's rows of every stack equal the adapter's A and Bᵀ, zero past its rank and for the
// targets it does not adapt; the scale is alpha / rank.
void ExpectSlotHolds(const LoraPool& pool, int slot, const LoraAdapter& a, int layers) {
  const int64_t r = a.layout().rank;
  for (int l = 0; l < layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto ta = pool.A(l, LoraTarget(t))[slot], tb = pool.BT(l, LoraTarget(t))[slot];
      if (!a.has(LoraTarget(t))) {
        EXPECT_EQ(ta.abs().max().item<float>(), 0) << l << " " << t;
        EXPECT_EQ(tb.abs().max().item<float>(), 0) << l << " " << t;
        continue;
      }
      EXPECT_TRUE(torch::equal(ta.narrow(0, 0, r), a.A(l, LoraTarget(t)))) << l << " " << t;
      EXPECT_TRUE(torch::equal(tb.narrow(0, 0, r), a.BT(l, LoraTarget(t)))) << l << " " << t;
      if (r < ta.size(0)) {
        EXPECT_EQ(ta.narrow(0, r, ta.size(0) - r).abs().max().item<float>(), 0);
        EXPECT_EQ(tb.narrow(0, r, tb.size(0) - r).abs().max().item<float>(), 0);
      }
    }
  }
  EXPECT_FLOAT_EQ(pool.scale()[slot].item<float>(), a.scale());
}

TEST(LoraPoolTest, SlotsHoldAdaptersAcrossGrowthAndReuse) {
  auto w = BaseWeights::Random(SmallConfig(false, false), 2);
  LoraPool pool(*w, torch::kCPU, /*slots=*/2, /*max_rank=*/4);
  const uint32_t attn = (1u << int(LoraTarget::kQ)) | (1u << int(LoraTarget::kV));
  auto a = RandomAdapter(*w, 4, attn, 1);
  auto b = RandomAdapter(*w, 2, (1u << kNumLoraTargets) - 1, 2);
  auto sa = pool.Acquire(a), sb = pool.Acquire(b);
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ(*sa, 0);
  EXPECT_EQ(*sb, 1);
  EXPECT_EQ(*pool.Acquire(a), 0);  // resident: the same slot, one more use
  EXPECT_EQ(pool.resident(), 2);
  // A third adapter, of a higher rank: the pool doubles its slots and raises its rank, and what
  // was resident stays where it was.
  auto c = RandomAdapter(*w, 8, (1u << kNumLoraTargets) - 1, 3);
  auto sc = pool.Acquire(c);
  ASSERT_TRUE(sc.ok());
  EXPECT_EQ(pool.slots(), 4);
  EXPECT_EQ(pool.max_rank(), 8u);
  EXPECT_EQ(*sc, 2);
  ExpectSlotHolds(pool, 0, *a, 2);
  ExpectSlotHolds(pool, 1, *b, 2);
  ExpectSlotHolds(pool, 2, *c, 2);
  // b leaves: its slot is the next one used, and the newcomer's rows are all its own.
  pool.Release(b.get());
  EXPECT_EQ(pool.SlotOf(b.get()), -1);
  auto d = RandomAdapter(*w, 1, attn, 4);
  EXPECT_EQ(*pool.Acquire(d), 1);
  ExpectSlotHolds(pool, 1, *d, 2);
  // a was acquired twice: one release keeps it.
  pool.Release(a.get());
  EXPECT_EQ(pool.SlotOf(a.get()), 0);
  pool.Release(a.get());
  EXPECT_EQ(pool.SlotOf(a.get()), -1);
}

TEST(LoraPoolTest, AdaptersThatDoNotFitAreRefusedWithTheReason) {
  auto w = BaseWeights::Random(SmallConfig(false, false), 2);
  LoraPool pool(*w, torch::kCPU);
  auto big = RandomAdapter(*w, LoraPool::kMaxPoolRank + 1, 1, 1);
  auto r = pool.Acquire(big);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 65"), std::string::npos) << r.status().ToString();
  ModelConfig deeper = SmallConfig(false, false);
  deeper.num_layers = 3;
  auto other = BaseWeights::Random(deeper, 2);
  auto wrong = pool.Acquire(RandomAdapter(*other, 4, 1, 1));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("3 layers"), std::string::npos);
  EXPECT_EQ(pool.resident(), 0);
}

// The pool's routing (slots in Step, segments, acquire and release in the Generator) on the CPU,
// where the pool runs LibTorch ops over its stacks: the same logits and generations as the
// adapters routed directly. On a GPU the same routing drives the CUDA kernels
// (tests/model/model_cuda_test.cc).
TEST(LoraPoolTest, StepThroughThePoolComputesWhatStepWithTheAdaptersComputes) {
  auto w = BaseWeights::Random(SmallConfig(false, true), 4);
  Transformer model(w);
  auto a = RandomAdapter(*w, 4, (1u << kNumLoraTargets) - 1, 1);
  auto b = RandomAdapter(*w, 8, (1u << int(LoraTarget::kQ)) | (1u << int(LoraTarget::kDown)), 2);
  LoraPool pool(*w, torch::kCPU, 1, 4);  // grows on the second adapter
  const int sb = *pool.Acquire(b), sa = *pool.Acquire(a);
  const std::vector<int64_t> lengths = {5, 1, 7, 3};
  std::vector<KvCache> direct, pooled;
  std::vector<torch::Tensor> inputs;
  for (int64_t n : lengths) {
    inputs.push_back(torch::randint(0, 50, {n}, torch::kInt64));
    direct.emplace_back(w->config);
    pooled.emplace_back(w->config);
  }
  LoraRouting by_adapter{{a.get(), b.get()}, {0, 1, -1, 0}};
  LoraRouting by_slot{{}, {sa, sb, -1, sa}, &pool};
  torch::NoGradGuard no_grad;
  for (int step = 0; step < 3; ++step) {  // a prefill (segments), then decode steps (one row each)
    std::vector<KvCache*> d, p;
    for (size_t i = 0; i < lengths.size(); ++i) {
      d.push_back(&direct[i]);
      p.push_back(&pooled[i]);
    }
    auto want = model.Step(inputs, d, &by_adapter);
    auto got = model.Step(inputs, p, &by_slot);
    EXPECT_LT(MaxAbsDiff(got, want), 1e-4) << "step " << step;
    auto next = want.argmax(-1);
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = next[int64_t(i)].reshape({1});
  }
  // The adapters change the logits, so routing them wrong would show.
  std::vector<torch::Tensor> first;
  for (int64_t n : lengths) first.push_back(torch::randint(0, 50, {n}, torch::kInt64));
  std::vector<KvCache> c1, c2;  // one each: a copied KvCache would share its tensors
  for (size_t i = 0; i < lengths.size(); ++i) {
    c1.emplace_back(w->config);
    c2.emplace_back(w->config);
  }
  std::vector<KvCache*> p1, p2;
  for (size_t i = 0; i < lengths.size(); ++i) {
    p1.push_back(&c1[i]);
    p2.push_back(&c2[i]);
  }
  LoraRouting none{{}, {-1, -1, -1, -1}};
  EXPECT_GT(MaxAbsDiff(model.Step(first, p1, &by_slot), model.Step(first, p2, &none)), 1e-3);
}

TEST(LoraPoolTest, TheGeneratorKeepsEachAdapterVersionResidentWhileItsSequencesRun) {
  auto w = BaseWeights::Random(SmallConfig(true, false), 5);
  Transformer model(w);
  auto v1 = RandomAdapter(*w, 4, (1u << kNumLoraTargets) - 1, 1);
  auto v2 = RandomAdapter(*w, 4, (1u << kNumLoraTargets) - 1, 2);  // the tenant's next version
  Generator direct(model), pooled(model, /*adapter_pool=*/true);
  ASSERT_EQ(direct.pool(), nullptr);
  ASSERT_NE(pooled.pool(), nullptr);
  auto request = [&](uint64_t id, std::shared_ptr<const LoraAdapter> a, int32_t n) {
    GenerationRequest r;
    r.id = id;
    r.prompt = {int32_t(3 + id), 11, int32_t(20 + id)};
    r.adapter = std::move(a);
    r.sampling.temperature = 0.8f;
    r.seed = 100 + id;
    r.max_new_tokens = n;
    return r;
  };
  // Two sequences of v1 (one short), one of v2, one base-only.
  const std::vector<GenerationRequest> reqs = {request(0, v1, 3), request(1, v1, 9),
                                               request(2, v2, 6), request(3, nullptr, 5)};
  for (const auto& r : reqs) {
    direct.Add(r);
    pooled.Add(r);
  }
  EXPECT_EQ(pooled.pool()->resident(), 2);  // v1 once, however many sequences use it
  std::map<uint64_t, GenerationResult> want, got;
  // The first step (every sequence prefills; none finishes) sees two distinct adapters either way.
  EXPECT_TRUE(direct.Step().empty());
  EXPECT_TRUE(pooled.Step().empty());
  EXPECT_EQ(direct.last_step().adapters, 2u);
  EXPECT_EQ(pooled.last_step().adapters, 2u);
  while (direct.active() > 0)
    for (auto& r : direct.Step()) want[r.id] = r;
  bool saw_one_left = false;
  while (pooled.active() > 0) {
    for (auto& r : pooled.Step()) got[r.id] = r;
    // After v2's sequence (6 tokens) and v1's short one, only v1's long one keeps a slot.
    if (got.size() == 3 && got.count(1) == 0) {
      EXPECT_EQ(pooled.pool()->resident(), 1);
      EXPECT_GE(pooled.pool()->SlotOf(v1.get()), 0);
      EXPECT_EQ(pooled.pool()->SlotOf(v2.get()), -1);
      saw_one_left = true;
    }
  }
  EXPECT_TRUE(saw_one_left);
  EXPECT_EQ(pooled.pool()->resident(), 0);  // every slot back once every sequence is done
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, r] : want) {
    EXPECT_EQ(got[id].tokens, r.tokens) << id;
    ASSERT_EQ(got[id].logprobs.size(), r.logprobs.size());
    for (size_t i = 0; i < r.logprobs.size(); ++i)
      EXPECT_NEAR(got[id].logprobs[i], r.logprobs[i], 1e-4) << id << " " << i;
  }
}

TEST(DeviceTest, NamesParseAndCudaNeedsACudaLibTorch) {
  EXPECT_EQ(*ParseDeviceName("cpu"), -1);
  EXPECT_EQ(*ParseDeviceName("cuda"), 0);
  EXPECT_EQ(*ParseDeviceName("cuda:3"), 3);
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:1234", "CPU", ""}) {
    auto r = ParseDeviceName(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("cpu, cuda, cuda:N"), std::string::npos);
  }
  auto cpu = ParseDevice("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->is_cpu());
  EXPECT_EQ(DeviceName(*cpu), "cpu");
  auto cuda = ParseDevice("cuda");
  if (torch::cuda::is_available()) {
    ASSERT_TRUE(cuda.ok());
    EXPECT_EQ(DeviceName(*cuda), "cuda:0");
  } else {
    ASSERT_FALSE(cuda.ok());
    EXPECT_EQ(cuda.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(cuda.status().message().find("CUDA"), std::string::npos);
  }
}

TEST(DeviceTest, LoadBaseOnTheCpuIsTheLoadedBase) {
  const std::string dir = std::string(MARLAAS_TEST_DATA_DIR) + "/llama";
  auto base = LoadBase("devtest", dir, torch::kCPU, Deadline::AfterMs(1000));
  auto loaded = BaseWeights::Load(dir);
  ASSERT_TRUE(base.ok() && loaded.ok()) << base.status().ToString();
  const auto want = (*loaded)->NamedTensors();
  const auto got = (*base)->NamedTensors();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) EXPECT_TRUE(torch::equal(got.at(name), t)) << name;
  auto missing = LoadBase("devtest", "/nonexistent-model", torch::kCPU, Deadline::AfterMs(1000));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent-model"), std::string::npos)
      << missing.status().ToString();
}

TEST(LoraAdapterDeviceTest, FlatTensorsAreTakenAsIsAndCheckedAgainstTheLayout) {
  auto w = BaseWeights::Random(SmallConfig(false, false), 2);
  auto a = RandomAdapter(*w, 4, 3, 1);
  auto flat = a->flat().clone();
  auto wrapped = LoraAdapter::FromFlatTensor(a->layout(), flat);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
  EXPECT_EQ(wrapped->flat().data_ptr(), flat.data_ptr());
  EXPECT_TRUE(torch::equal(wrapped->A(1, LoraTarget::kK), a->A(1, LoraTarget::kK)));
  auto short_flat = LoraAdapter::FromFlatTensor(a->layout(), flat.narrow(0, 1, flat.numel() - 1));
  ASSERT_FALSE(short_flat.ok());
  EXPECT_NE(short_flat.status().message().find("elements"), std::string::npos);
  EXPECT_FALSE(LoraAdapter::FromFlatTensor(a->layout(), flat.to(torch::kFloat64)).ok());
  // MoveTo the device it is on keeps the tensor.
  LoraAdapter moved = std::move(*wrapped);
  moved.MoveTo(torch::kCPU);
  EXPECT_EQ(moved.flat().data_ptr(), flat.data_ptr());
}

}  // namespace
}  // namespace marlaas::model

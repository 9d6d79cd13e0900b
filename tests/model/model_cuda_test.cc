// The model on a CUDA device against the same model on the CPU, on random inputs: the packed
// base on the device with the LoraPool and the CUDA SGMV/BGMV kernels (prefill and decode
// steps), the fused log-prob forward and backward, a multi-tenant GRPO step, and the base shared
// by two processes (the second opens the first one's copy instead of allocating its own). Skips
// without a GPU or without a CUDA LibTorch (Debian's is CPU-only). Every CUDA call runs in a
// forked child: this test process never initialises CUDA (a CUDA context does not survive a
// fork), and a child's check failures come back as text.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>

#include "base/file_util.h"
#include "kernels/gpu_info.h"
#include "model/compute_threads.h"
#include "model/device_base.h"
#include "model/generator.h"
#include "model/packed_weights.h"
#include "model/tensor_io.h"
#include "model/token_logprobs.h"
#include "model/transformer.h"
#include "rl/multi_tenant_step.h"
#include "tests/test_util.h"

namespace marlaas::model {
namespace {

using testing::ForkChild;
using testing::MapShared;
using testing::UnmapShared;
using testing::WaitChild;
using testing::WaitForFlag;

struct ChildReport {
  std::atomic<int> flags[4];
  char message[4096];
};

// Runs `body` in a forked child; "" means it passed. The child reports "skip: ..." when the
// LibTorch in use has no CUDA.
class ModelCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const GpuInfo gpus = QueryGpusInChild();
    if (gpus.devices.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << gpus.why_none;
    // One CPU thread: the children are forked from this process, and a child must not inherit
    // an OpenMP pool the parent's CPU tensor work started.
    SetComputeThreads(1);
    report_ = MapShared<ChildReport>();
  }
  void TearDown() override {
    if (report_ != nullptr) UnmapShared(report_);
  }
  static std::string Guarded(const std::function<std::string()>& body) {
    if (!torch::cuda::is_available()) return "skip: this LibTorch has no CUDA";
    try {
      return body();
    } catch (const std::exception& e) {
      return std::string("threw: ") + e.what();
    }
  }
  pid_t Start(const std::function<std::string()>& body, ChildReport* r) {
    return ForkChild([body, r] {
      const std::string m = Guarded(body);
      std::snprintf(r->message, sizeof(r->message), "%s", m.c_str());
      return m.empty() ? 0 : 1;
    });
  }
  // Runs one child to the end and turns its report into the test's outcome.
  void RunInChild(const std::function<std::string()>& body) {
    const auto exit = WaitChild(Start(body, report_));
    const std::string m = report_->message;
    if (m.rfind("skip:", 0) == 0) GTEST_SKIP() << m;
    EXPECT_TRUE(exit.exited && exit.code == 0)
        << m << " (exit " << exit.code << ", signal " << exit.signal << ")";
  }
  ChildReport* report_ = nullptr;
};

ModelConfig Config() {
  ModelConfig c;
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.intermediate_size = 320;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 32;
  return c;
}

std::shared_ptr<const LoraAdapter> RandomAdapter(const BaseWeights& w, uint32_t rank,
                                                 uint64_t seed) {
  auto a = LoraAdapter::Create(w, rank, 2.0f * float(rank), (1u << kNumLoraTargets) - 1, seed);
  TORCH_CHECK(a.ok(), a.status().ToString());  // throws: the test fails, nothing dereferenced
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  a->flat().normal_(0, 0.05, gen);
  return std::make_shared<const LoraAdapter>(std::move(*a));
}

// The base packed into device memory (a LibTorch allocation holds the block).
std::shared_ptr<const BaseWeights> OnCuda(const BaseWeights& w) {
  auto packed = PackOnDevice(w, torch::kCUDA);
  TORCH_CHECK(packed.ok(), packed.status().ToString());
  return *packed;
}

std::string Diff(const char* what, const torch::Tensor& a, const torch::Tensor& b, double tol) {
  const double d = (a.cpu() - b.cpu()).abs().max().item<double>();
  if (d <= tol) return "";
  std::ostringstream m;
  m << what << ": max |diff| " << d << " > " << tol << "; ";
  return m.str();
}

TEST_F(ModelCudaTest, StepsWithTheLoraPoolMatchTheCpu) {
  RunInChild([]() -> std::string {
    auto cpu_w = BaseWeights::Random(Config(), 11);
    Transformer cpu(cpu_w), gpu(OnCuda(*cpu_w));
    auto a = RandomAdapter(*cpu_w, 4, 1), b = RandomAdapter(*cpu_w, 16, 2);
    LoraPool pool(*cpu_w, gpu.device());
    const int sa = *pool.Acquire(a), sb = *pool.Acquire(b);
    // Five rows: a, base only, b, a, b; prompts of different lengths (SGMV over segments),
    // then decode steps of one token each (BGMV).
    const std::vector<int64_t> lengths = {7, 3, 12, 1, 5};
    std::vector<KvCache> cpu_caches, gpu_caches;
    std::vector<torch::Tensor> inputs;
    for (int64_t n : lengths) {
      inputs.push_back(torch::randint(0, 512, {n}, torch::kInt64));
      cpu_caches.emplace_back(cpu_w->config, 8);
      gpu_caches.emplace_back(cpu_w->config, 8, torch::Device(torch::kCUDA));
    }
    LoraRouting cpu_route{{a.get(), b.get()}, {0, -1, 1, 0, 1}};
    LoraRouting gpu_route{{}, {sa, -1, sb, sa, sb}, &pool};
    std::string failures;
    torch::NoGradGuard no_grad;
    for (int step = 0; step < 4; ++step) {
      std::vector<KvCache*> cc, gc;
      for (size_t i = 0; i < lengths.size(); ++i) {
        cc.push_back(&cpu_caches[i]);
        gc.push_back(&gpu_caches[i]);
      }
      auto want = cpu.Step(inputs, cc, &cpu_route);
      auto got = gpu.Step(inputs, gc, &gpu_route);
      failures += Diff(step == 0 ? "prefill logits" : "decode logits", got, want, 2e-3);
      auto next = want.argmax(-1);
      for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = next[int64_t(i)].reshape({1});
    }
    return failures;
  });
}

TEST_F(ModelCudaTest, GreedyGenerationMatchesTheCpu) {
  RunInChild([]() -> std::string {
    auto cpu_w = BaseWeights::Random(Config(), 12);
    Transformer cpu(cpu_w), gpu(OnCuda(*cpu_w));
    auto a = RandomAdapter(*cpu_w, 8, 3);
    Generator cg(cpu), gg(gpu);
    for (uint64_t id = 0; id < 3; ++id) {
      GenerationRequest r;
      r.id = id;
      r.prompt = {int32_t(5 + id), 17, 42, int32_t(100 + id)};
      r.adapter = id == 1 ? nullptr : a;
      r.sampling.greedy = true;
      r.max_new_tokens = 10;
      cg.Add(r);
      gg.Add(r);
    }
    std::map<uint64_t, GenerationResult> want, got;
    while (cg.active() > 0)
      for (auto& r : cg.Step()) want[r.id] = r;
    while (gg.active() > 0)
      for (auto& r : gg.Step()) got[r.id] = r;
    std::string failures;
    for (auto& [id, w] : want) {
      if (got[id].tokens != w.tokens) failures += "tokens of sequence " + std::to_string(id) + "; ";
      for (size_t i = 0; i < w.logprobs.size() && i < got[id].logprobs.size(); ++i) {
        if (std::abs(w.logprobs[i] - got[id].logprobs[i]) > 2e-3f) {
          failures += "log-prob " + std::to_string(i) + " of " + std::to_string(id) + "; ";
          break;
        }
      }
    }
    return failures;
  });
}

TEST_F(ModelCudaTest, FusedLogprobsMatchTheCpuForwardAndBackward) {
  RunInChild([]() -> std::string {
    auto logits = torch::randn({37, 1000}) * 3;
    auto targets = torch::randint(0, 1000, {37}, torch::kInt64);
    auto cpu_l = logits.clone().requires_grad_(true);
    auto gpu_l = logits.to(torch::kCUDA).requires_grad_(true);
    auto want = TokenLogprobs(cpu_l, targets, 0.7f);
    auto got = TokenLogprobs(gpu_l, targets.to(torch::kCUDA), 0.7f);
    auto g = torch::randn({37});
    want.backward(g);
    got.backward(g.to(torch::kCUDA));
    return Diff("log-probs", got.detach(), want.detach(), 1e-4) +
           Diff("d logits", gpu_l.grad(), cpu_l.grad(), 1e-5);
  });
}

// The gradients of each step, compared relative to their scale, and the adapters after two steps.
// SGD, not the trainer's AdamW: AdamW's first step moves every element by about ±lr whatever the
// gradient's size, so a gradient near 0 whose sign differs between the devices by roundoff would
// differ by 2 lr; SGD's update is linear in the gradient compared here.
TEST_F(ModelCudaTest, AMultiTenantGrpoStepMatchesTheCpu) {
  RunInChild([]() -> std::string {
    auto cpu_w = BaseWeights::Random(Config(), 13);
    Transformer cpu(cpu_w), gpu(OnCuda(*cpu_w));
    std::string failures;
    std::vector<std::vector<torch::Tensor>> flats(2), grads(2), initial(2);
    for (int side = 0; side < 2; ++side) {
      const Transformer& model = side == 0 ? cpu : gpu;
      std::vector<LoraAdapter> adapters;
      std::vector<std::unique_ptr<torch::optim::SGD>> opts;
      for (uint64_t k = 0; k < 2; ++k) {
        adapters.push_back(*LoraAdapter::Create(*cpu_w, 4 + 4 * uint32_t(k), 8, 0x7f, 20 + k));
        adapters.back().MoveTo(model.device());
        adapters.back().flat().set_requires_grad(true);
      }
      std::vector<rl::TenantStep> steps(2);
      for (size_t k = 0; k < 2; ++k) {
        opts.push_back(std::make_unique<torch::optim::SGD>(
            std::vector<torch::Tensor>{adapters[k].flat()}, torch::optim::SGDOptions(0.5)));
        steps[k].adapter = &adapters[k];
        steps[k].optimizer = opts.back().get();
        for (int row = 0; row < 3; ++row) {
          rl::Completion c;
          for (int i = 0; i < 10 + 3 * row + int(k); ++i)
            c.tokens.push_back((row * 37 + i * 11 + int(k)) % 512);
          c.behaviour_logprobs.assign(c.tokens.size(), -6.0f);
          c.loss_mask.assign(c.tokens.size(), 0);
          for (size_t i = 4; i < c.tokens.size(); ++i) c.loss_mask[i] = 1;
          c.advantage = row == 1 ? -1.0f : 0.5f;
          steps[k].completions.push_back(c);
        }
      }
      for (auto& a : adapters) initial[size_t(side)].push_back(a.flat().detach().cpu().clone());
      // Two steps: the second starts from the first one's update.
      for (int s = 0; s < 2; ++s) {
        rl::MultiTenantStep(model, steps);
        for (auto& a : adapters)  // a copy: the next step's zero_grad may zero it in place
          grads[size_t(side)].push_back(a.flat().grad().detach().cpu().clone());
      }
      for (auto& a : adapters) flats[size_t(side)].push_back(a.flat().detach().cpu());
    }
    for (size_t i = 0; i < grads[0].size(); ++i) {
      const double scale = grads[0][i].abs().max().item<double>();
      if (!(scale > 0)) failures += "a tenant's gradient is zero on the CPU; ";
      failures += Diff("gradient", grads[1][i], grads[0][i], 1e-3 * scale + 1e-7);
    }
    for (size_t k = 0; k < 2; ++k) {
      failures += Diff("initial adapter", initial[1][k], initial[0][k], 0);
      const double moved = (flats[0][k] - initial[0][k]).abs().max().item<double>();
      if (!(moved > 0)) failures += "the CPU steps did not move an adapter; ";
      failures += Diff("trained adapter", flats[1][k], flats[0][k], 2e-3 * moved + 1e-6);
    }
    return failures;
  });
}

TEST_F(ModelCudaTest, TwoProcessesOnOneGpuShareOneCopyOfTheBase) {
  // A base large enough that a second copy would show in the device's free memory.
  ModelConfig c = Config();
  c.vocab_size = 16384;
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_heads = 8;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  const std::string dir = ::testing::TempDir() + "/marlaas-cuda-base-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto w = BaseWeights::Random(c, 5);
  ASSERT_TRUE(SaveTensors(dir + "/model.safetensors", w->NamedTensors(), {}).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/config.json", c.ToJson()).ok());
  const uint64_t bytes = PackLayout(*w).bytes;
  testing::ScopedInstance inst;
  ChildReport* other = MapShared<ChildReport>();
  const std::string name = inst.name();
  auto tokens = torch::randint(0, 16384, {2, 6}, torch::kInt64);
  const auto want = Transformer(w).Forward(tokens).detach();
  // The owner loads, then holds its copy until the opener is done (flags[0]: loaded, [1]: the
  // opener finished, [2]: the owner returned, whatever it reported).
  pid_t owner = Start(
      [&]() -> std::string {
        auto base = LoadBase(name, dir, torch::kCUDA, Deadline::AfterMs(60000));
        if (!base.ok()) return "owner: " + base.status().ToString();
        report_->flags[0] = 1;
        if (!WaitForFlag(report_->flags[1], 120)) return "owner: the opener never finished";
        return "";
      },
      report_);
  // Wait for the owner's copy, or for the owner to end without one (a skip or a failure).
  int owner_status = 0;
  bool owner_ended = false;
  for (int i = 0; i < 1200 && !report_->flags[0]; ++i) {
    if (waitpid(owner, &owner_status, WNOHANG) == owner) {
      owner_ended = true;
      break;
    }
    usleep(100 * 1000);
  }
  if (owner_ended || !report_->flags[0]) {
    if (!owner_ended) testing::KillChild(owner);
    const std::string m = report_->message;
    UnmapShared(other);
    std::filesystem::remove_all(dir);
    if (m.rfind("skip:", 0) == 0) GTEST_SKIP() << m;
    FAIL() << "the owner did not load the base: " << m;
  }
  pid_t opener = Start(
      [&]() -> std::string {
        cudaFree(nullptr);  // the context first, so the baseline includes it
        size_t free0 = 0, free1 = 0, total = 0;
        cudaMemGetInfo(&free0, &total);
        auto base = LoadBase(name, dir, torch::kCUDA, Deadline::AfterMs(60000));
        if (!base.ok()) return "opener: " + base.status().ToString();
        cudaMemGetInfo(&free1, &total);
        std::string failures;
        const int64_t allocated = int64_t(free0) - int64_t(free1);
        if (allocated > int64_t(bytes / 2)) {
          failures += "the opener allocated " + std::to_string(allocated) +
                      " bytes for a base of " + std::to_string(bytes) + "; ";
        }
        torch::NoGradGuard no_grad;
        failures +=
            Diff("logits of the shared base", Transformer(*base).Forward(tokens), want, 2e-3);
        report_->flags[1] = 1;
        return failures;
      },
      other);
  const auto opener_exit = WaitChild(opener);
  report_->flags[1] = 1;
  const auto owner_exit = WaitChild(owner);
  const std::string om = other->message, wm = report_->message;
  UnmapShared(other);
  std::filesystem::remove_all(dir);
  if (om.rfind("skip:", 0) == 0) GTEST_SKIP() << om;
  EXPECT_TRUE(opener_exit.exited && opener_exit.code == 0) << om;
  EXPECT_TRUE(owner_exit.exited && owner_exit.code == 0) << wm;
}

}  // namespace
}  // namespace marlaas::model

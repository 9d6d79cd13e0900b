// bench_lora: batched multi-LoRA against (a) each tenant's rows as a separate batch and (b) the
// base model without LoRA, on a Llama-shaped model (hidden 1024, 4 layers, random weights),
// batch 64, rank 16, for 1, 8 and 32 tenants. Decode: one token for each of 64 sequences with a
// 64-token context (BGMV), the median of 16 steps; prefill: 64 prompts of 64 tokens packed into
// one forward (SGMV), the best of 3.
// One compute thread, as the service runs on this class of machine.
//
//   bench_lora [--json FILE] [--quick]
//
// Exit status: 0, or 1 when a target is missed in a full run (--quick only smoke-tests).
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/report.h"
#include "model/compute_threads.h"
#include "model/transformer.h"

namespace marlaas::bench {
namespace {

using model::BaseWeights;
using model::KvCache;
using model::LoraAdapter;
using model::LoraRouting;
using model::Transformer;

constexpr int kBatch = 64, kContext = 64, kRank = 16;

struct Row {
  std::string phase, mode;
  int tenants;
  double tokens_per_s;
};

// --quick (the ctest smoke run) takes the same paths on a model a quarter as wide with a small
// vocabulary: the full shape costs minutes of a CI core.
model::ModelConfig BenchConfig(bool quick) {
  model::ModelConfig c;
  c.vocab_size = quick ? 4096 : 32000;
  c.hidden_size = quick ? 256 : 1024;
  c.intermediate_size = quick ? 704 : 2816;
  c.num_layers = quick ? 2 : 4;
  c.num_heads = quick ? 4 : 16;
  c.num_kv_heads = quick ? 4 : 16;
  c.head_dim = 64;
  return c;
}

std::vector<torch::Tensor> Prompts(int n, int len, int vocab) {
  std::vector<torch::Tensor> out;
  for (int i = 0; i < n; ++i) out.push_back(torch::randint(vocab, {len}, torch::kInt64));
  return out;
}

// Rows [first, first + count) of the batch, stepped as one forward with `routing`.
struct Batch {
  std::vector<torch::Tensor> tokens;
  std::vector<KvCache*> caches;
  LoraRouting routing;
};

class Bench {
 public:
  Bench(const Transformer& model, int tenants, bool quick) : model_(model), tenants_(tenants) {
    repeats_ = quick ? 1 : 3;
    for (int k = 0; k < tenants; ++k) {
      auto a = LoraAdapter::Create(model.weights(), kRank, 32.0f, (1u << kNumLoraTargets) - 1, k);
      torch::NoGradGuard no_grad;
      a->flat().normal_(0, 0.01);
      adapters_.push_back(std::make_unique<LoraAdapter>(std::move(*a)));
    }
  }

  // Tenant of batch row i: contiguous blocks of kBatch / tenants rows.
  int TenantOf(int i) const { return i / (kBatch / tenants_); }

  // Groups of rows stepped together: one group (multi_lora, base_only) or one per tenant.
  std::vector<std::vector<int>> Groups(const std::string& mode) const {
    if (mode != "per_tenant_loop") {
      std::vector<int> all(kBatch);
      for (int i = 0; i < kBatch; ++i) all[size_t(i)] = i;
      return {all};
    }
    std::vector<std::vector<int>> g(static_cast<size_t>(tenants_));
    for (int i = 0; i < kBatch; ++i) g[size_t(TenantOf(i))].push_back(i);
    return g;
  }

  Batch Make(const std::string& mode, const std::vector<int>& rows,
             const std::vector<torch::Tensor>& inputs, std::vector<KvCache>& caches) const {
    Batch b;
    for (int i : rows) {
      b.tokens.push_back(inputs[size_t(i)]);
      b.caches.push_back(&caches[size_t(i)]);
      if (mode != "base_only") {
        const int t = TenantOf(i);
        auto it = std::find(b.routing.adapters.begin(), b.routing.adapters.end(),
                            adapters_[size_t(t)].get());
        if (it == b.routing.adapters.end()) {
          b.routing.adapters.push_back(adapters_[size_t(t)].get());
          it = b.routing.adapters.end() - 1;
        }
        b.routing.row_adapter.push_back(int32_t(it - b.routing.adapters.begin()));
      }
    }
    return b;
  }

  // One cache per row. (Copies of one KvCache would share its tensors: every row would write
  // into the same keys and values.)
  std::vector<KvCache> Caches(int64_t capacity) const {
    std::vector<KvCache> caches;
    for (int i = 0; i < kBatch; ++i) caches.emplace_back(model_.config(), capacity);
    return caches;
  }

  double Prefill(const std::string& mode) const {
    torch::NoGradGuard no_grad;
    auto prompts = Prompts(kBatch, kContext, model_.config().vocab_size);
    double best = 1e30;
    for (int r = 0; r < repeats_; ++r) {
      std::vector<KvCache> caches = Caches(kContext + 8);
      const double t0 = NowSeconds();
      for (const auto& rows : Groups(mode)) {
        Batch b = Make(mode, rows, prompts, caches);
        model_.Step(b.tokens, b.caches, mode == "base_only" ? nullptr : &b.routing);
      }
      best = std::min(best, NowSeconds() - t0);
    }
    return double(kBatch) * kContext / best;
  }

  double Decode(const std::string& mode, int steps) const {
    torch::NoGradGuard no_grad;
    auto prompts = Prompts(kBatch, kContext, model_.config().vocab_size);
    std::vector<KvCache> caches = Caches(kContext + steps + 8);
    for (const auto& rows : Groups(mode)) {  // fill the contexts (not timed)
      Batch b = Make(mode, rows, prompts, caches);
      model_.Step(b.tokens, b.caches, mode == "base_only" ? nullptr : &b.routing);
    }
    auto next = Prompts(kBatch, 1, model_.config().vocab_size);
    // The median step: robust to the other processes of a shared 2-core machine.
    std::vector<double> step_seconds;
    for (int s = 0; s < steps; ++s) {
      const double t0 = NowSeconds();
      for (const auto& rows : Groups(mode)) {
        Batch b = Make(mode, rows, next, caches);
        model_.Step(b.tokens, b.caches, mode == "base_only" ? nullptr : &b.routing);
      }
      step_seconds.push_back(NowSeconds() - t0);
    }
    return double(kBatch) / Percentile(step_seconds, 50);
  }

 private:
  const Transformer& model_;
  int tenants_;
  int repeats_;
  std::vector<std::unique_ptr<LoraAdapter>> adapters_;
};

int Run(int argc, char** argv) {
  BenchArgs args;
  if (!ParseBenchArgs(argc, argv, "bench_lora [--json FILE] [--quick]", &args)) return 2;
  const bool quick = args.quick;
  model::SetComputeThreads(1);
  torch::manual_seed(0);
  const model::ModelConfig config = BenchConfig(quick);
  Transformer model(BaseWeights::Random(config, 1));
  const int steps = quick ? 2 : 16;
  std::vector<Row> rows;
  for (int tenants : {1, 8, 32}) {
    Bench bench(model, tenants, quick);
    for (const char* mode : {"multi_lora", "per_tenant_loop", "base_only"}) {
      rows.push_back({"decode", mode, tenants, bench.Decode(mode, steps)});
      rows.push_back({"prefill", mode, tenants, bench.Prefill(mode)});
      std::fprintf(stderr, "  %2d tenants %-16s done\n", tenants, mode);
    }
  }
  auto find = [&](const std::string& phase, const std::string& mode, int tenants) {
    for (const Row& r : rows)
      if (r.phase == phase && r.mode == mode && r.tenants == tenants) return r.tokens_per_s;
    return 0.0;
  };
  std::printf("\nmodel: hidden %d, %d layers, vocab %d, ffn %d; batch %d, context %d, rank %d\n",
              config.hidden_size, config.num_layers, config.vocab_size, config.intermediate_size,
              kBatch, kContext, kRank);
  std::printf("%-8s %-16s %8s %12s %12s %12s\n", "phase", "mode", "tenants", "tokens/s",
              "multi/this", "this/base");
  for (const Row& r : rows) {
    std::printf("%-8s %-16s %8d %12.1f %11.2fx %11.2fx\n", r.phase.c_str(), r.mode.c_str(),
                r.tenants, r.tokens_per_s, find(r.phase, "multi_lora", r.tenants) / r.tokens_per_s,
                r.tokens_per_s / find(r.phase, "base_only", r.tenants));
  }
  std::vector<Target> targets = {
      {"decode, 32 tenants: multi_lora / per_tenant_loop",
       find("decode", "multi_lora", 32) / find("decode", "per_tenant_loop", 32), 8.0, true},
      {"decode, 32 tenants: multi_lora / base_only",
       find("decode", "multi_lora", 32) / find("decode", "base_only", 32), 0.8, true},
  };
  std::vector<std::string> objects;
  for (const Row& r : rows) {
    objects.push_back("{\"phase\":\"" + r.phase + "\",\"mode\":\"" + r.mode +
                      "\",\"tenants\":" + std::to_string(r.tenants) +
                      ",\"tokens_per_s\":" + JsonNumber(r.tokens_per_s) + "}");
  }
  return FinishBench(args, objects, targets);
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Run(argc, argv); }

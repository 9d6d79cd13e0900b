// bench_model_profile: measures the stage costs the simulator projects with (bench/sim
// cost_model.h) on this machine's device, by running what the stages run: the rollout's
// continuous batching (model::Generator: a LoraPool and the CUDA multi-LoRA kernels on a GPU)
// over a grid of batch rows and distinct adapters, prefill and decode, and the trainer's
// multi-tenant GRPO step (rl::MultiTenantStep) over a grid of tenants and row lengths. Each pass
// and step is added to a CostSums as the stages add theirs and fitted the same way
// (FitLinearCost), so `marlaas bench sim --calibrate RUN --profile FILE` can project a GPU from
// it. Wall time per pass, after the device has finished it (the Generator brings its logits
// to the host; the step reads its losses).
//
//   bench_model_profile [--device cpu|cuda] [--model tiny|qwen2.5-0.5b] [--profile FILE]
//                       [--json FILE] [--quick]
//
// Targets (a profile that could not describe the device is no profile): the rollout fit is
// within 25% of the measured time of the largest decode pass, and a 256-row decode pass costs
// less than 256 one-row passes (batching pays). Exit 1 when a full run misses one.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "bench/report.h"
#include "bench/sim/cost_model.h"
#include "model/compute_threads.h"
#include "model/device.h"
#include "model/generator.h"
#include "model/packed_weights.h"
#include "model/pretrain.h"
#include "rl/multi_tenant_step.h"

namespace marlaas::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

model::ModelConfig ConfigNamed(const std::string& name) {
  if (name == "qwen2.5-0.5b") {  // Qwen2.5-0.5B's shape
    model::ModelConfig c;
    c.model_type = "qwen2";
    c.vocab_size = 151936;
    c.hidden_size = 896;
    c.intermediate_size = 4864;
    c.num_layers = 24;
    c.num_heads = 14;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.tie_word_embeddings = true;
    c.qkv_bias = true;
    return c;
  }
  return model::TinyConfig();
}

struct PassRow {
  int rows, adapters, prompt;
  double prefill_ms, decode_ms;
};

// `rows` sequences over `adapters` adapters, prompts of `prompt` tokens, `decode` tokens each:
// every Step is one pass (the first prefills). Adds them all to `sums`.
PassRow Passes(const model::Transformer& model,
               const std::vector<std::shared_ptr<const model::LoraAdapter>>& adapters, int rows,
               int used, int prompt, int decode, CostSums* sums) {
  model::Generator gen(model);
  const int32_t vocab = int32_t(model.config().vocab_size);
  for (int r = 0; r < rows; ++r) {
    model::GenerationRequest q;
    q.id = uint64_t(r);
    for (int i = 0; i < prompt; ++i) q.prompt.push_back((r * 131 + i * 17 + 3) % vocab);
    q.adapter = adapters[size_t(r % used)];
    q.seed = uint64_t(r + 1);
    q.max_new_tokens = decode;
    gen.Add(std::move(q));
  }
  PassRow out{rows, used, prompt, 0, 0};
  int decodes = 0;
  while (gen.active() > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    gen.Step();
    const double s = Seconds(t0);
    const model::StepShape& shape = gen.last_step();
    sums->Add(double(shape.rows), double(shape.tokens), double(shape.adapters), 0.0, s);  // warm
    if (shape.tokens > shape.rows) {
      out.prefill_ms = s * 1e3;
    } else {
      out.decode_ms += s * 1e3;
      ++decodes;
    }
  }
  if (decodes > 0) out.decode_ms /= decodes;
  return out;
}

struct StepRow {
  int tenants, rows, len;
  double ms;
};

StepRow TrainStep(const model::Transformer& model, int tenants, int rows, int len, int reps,
                  CostSums* sums) {
  const model::BaseWeights& w = model.weights();
  std::vector<std::unique_ptr<model::LoraAdapter>> adapters;
  std::vector<std::unique_ptr<torch::optim::AdamW>> opts;
  std::vector<rl::TenantStep> steps(static_cast<size_t>(tenants));
  for (int t = 0; t < tenants; ++t) {
    auto a = model::LoraAdapter::Create(w, 8, 16.0f, 0x7f, uint64_t(t + 1));
    adapters.push_back(std::make_unique<model::LoraAdapter>(std::move(*a)));
    adapters.back()->MoveTo(model.device());
    adapters.back()->flat().set_requires_grad(true);
    opts.push_back(std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{adapters.back()->flat()}, torch::optim::AdamWOptions(1e-4)));
    steps[size_t(t)].adapter = adapters.back().get();
    steps[size_t(t)].optimizer = opts.back().get();
  }
  const int32_t vocab = int32_t(w.config.vocab_size);
  for (int r = 0; r < rows; ++r) {
    rl::Completion c;
    for (int j = 0; j < len; ++j) {
      c.tokens.push_back((r * 37 + j * 11 + 5) % vocab);
      c.loss_mask.push_back(j >= len / 2 ? 1 : 0);
      c.behaviour_logprobs.push_back(j >= len / 2 ? -3.0f : 0.0f);
    }
    c.advantage = float(r % 3 - 1);
    steps[size_t(r % tenants)].completions.push_back(std::move(c));
  }
  rl::MultiTenantStep(model, steps);  // warm-up (allocator, kernels)
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<rl::TenantStepResult> res = rl::MultiTenantStep(model, steps);
    const double s = Seconds(t0);
    double padded = 0;
    for (const auto& x : res) padded += double(x.padded_tokens);
    sums->Add(double(rows), padded, double(tenants), 0.0, s);  // back to back: warm
    ms.push_back(s * 1e3);
  }
  return {tenants, rows, len, Percentile(ms, 50)};
}

int Run(int argc, char** argv) {
  std::string device_name = "cpu", model_name = "tiny", profile_path;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    const std::string a = argv[i];
    bool ok = true;
    if (a == "--device") {
      ok = value(&device_name);
    } else if (a == "--model") {
      ok = value(&model_name) && (model_name == "tiny" || model_name == "qwen2.5-0.5b");
    } else if (a == "--profile") {
      ok = value(&profile_path);
    } else {
      rest.push_back(argv[i]);
    }
    if (!ok) {
      std::fprintf(stderr, "bench_model_profile: bad or missing value for %s\n", a.c_str());
      return 2;
    }
  }
  BenchArgs args;
  const char* usage =
      "bench_model_profile [--device cpu|cuda] [--model tiny|qwen2.5-0.5b] [--profile FILE] "
      "[--json FILE] [--quick]";
  if (!ParseBenchArgs(int(rest.size()), rest.data(), usage, &args)) return 2;
  if (!profile_path.empty()) {
    if (Status st = CheckOutputFile("--profile", profile_path); !st.ok()) {
      std::fprintf(stderr, "bench_model_profile: %s\n", st.message().c_str());
      return 2;
    }
  }
  auto device = model::ParseDevice(device_name);
  if (!device.ok()) {  // a device this build or host lacks, or a typo
    std::fprintf(stderr, "bench_model_profile: --device: %s\n", device.status().message().c_str());
    return 2;
  }
  model::SetComputeThreads(1);
  auto host = model::BaseWeights::Random(ConfigNamed(model_name), 1);
  std::shared_ptr<const model::BaseWeights> weights = host;
  if (device->is_cuda()) {
    auto packed = model::PackOnDevice(*host, *device);
    if (!packed.ok()) {
      std::fprintf(stderr, "bench_model_profile: %s\n", packed.status().ToString().c_str());
      return 1;
    }
    weights = *packed;
  }
  const model::Transformer model(weights);
  std::vector<std::shared_ptr<const model::LoraAdapter>> adapters;
  for (int k = 0; k < 32; ++k) {
    auto a = model::LoraAdapter::Create(*host, 16, 32.0f, 0x7f, uint64_t(k + 1));
    adapters.push_back(std::make_shared<const model::LoraAdapter>(std::move(*a)));
  }
  std::printf("device %s, model %s\n", model::DeviceName(*device).c_str(), model_name.c_str());
  // The larger model's passes are longer (and, on a GPU, launch-bound by the per-row attention):
  // a smaller grid keeps its run to about a minute.
  const bool large = model_name != "tiny";
  const std::vector<int> row_grid = args.quick ? std::vector<int>{1, 8}
                                    : large    ? std::vector<int>{1, 8, 32, 128}
                                               : std::vector<int>{1, 8, 32, 64, 128, 256};
  const std::vector<int> adapter_grid =
      args.quick ? std::vector<int>{1, 4} : std::vector<int>{1, 8, 32};
  const int decode = args.quick ? 4 : large ? 8 : 16;
  CostSums rollout{}, trainer{};
  std::vector<std::string> objects;
  std::vector<PassRow> passes;
  std::printf("%6s %9s %7s %11s %11s\n", "rows", "adapters", "prompt", "prefill ms", "decode ms");
  Passes(model, adapters, 4, 1, 16, 2, &rollout);  // warm-up, kept: it is a pass like the others
  for (int rows : row_grid) {
    for (int used : adapter_grid) {
      if (used > rows) continue;
      for (int prompt : {16, 64}) {
        const PassRow p = Passes(model, adapters, rows, used, prompt, decode, &rollout);
        passes.push_back(p);
        std::printf("%6d %9d %7d %11.3f %11.3f\n", p.rows, p.adapters, p.prompt, p.prefill_ms,
                    p.decode_ms);
        std::fflush(stdout);
        objects.push_back("{\"pass\":true,\"rows\":" + std::to_string(p.rows) + ",\"adapters\":" +
                          std::to_string(p.adapters) + ",\"prompt\":" + std::to_string(p.prompt) +
                          ",\"prefill_ms\":" + JsonNumber(p.prefill_ms) +
                          ",\"decode_ms\":" + JsonNumber(p.decode_ms) + "}");
      }
    }
  }
  std::printf("%8s %6s %5s %10s\n", "tenants", "rows", "len", "ms/step");
  const std::vector<std::array<int, 3>> step_grid =
      args.quick ? std::vector<std::array<int, 3>>{{1, 8, 16}, {2, 8, 16}}
      : large
          ? std::vector<std::array<int, 3>>{{1, 8, 32},
                                            {1, 64, 32},
                                            {4, 64, 64},
                                            {8, 128, 64},
                                            {32, 128, 32}}
          : std::vector<std::array<int, 3>>{{1, 8, 32},   {1, 64, 32},   {1, 64, 128}, {4, 64, 32},
                                            {8, 128, 64}, {16, 256, 32}, {32, 256, 64}};
  for (const auto& g : step_grid) {
    const StepRow s = TrainStep(model, g[0], g[1], g[2], args.quick ? 1 : 3, &trainer);
    std::printf("%8d %6d %5d %10.2f\n", s.tenants, s.rows, s.len, s.ms);
    std::fflush(stdout);
    objects.push_back("{\"step\":true,\"tenants\":" + std::to_string(s.tenants) +
                      ",\"rows\":" + std::to_string(s.rows) + ",\"len\":" + std::to_string(s.len) +
                      ",\"ms\":" + JsonNumber(s.ms) + "}");
  }
  auto rfit = sim::FitLinearCost(rollout);
  auto tfit = sim::FitLinearCost(trainer);
  if (!rfit.ok() || !tfit.ok()) {
    std::fprintf(stderr, "bench_model_profile: %s\n",
                 (!rfit.ok() ? rfit.status() : tfit.status()).ToString().c_str());
    return 1;
  }
  sim::CostProfile profile;
  profile.name = model_name + " on " + model::DeviceName(*device);
  profile.placement = device->is_cuda() ? "accelerator" : "shared";
  profile.rollout = *rfit;
  profile.trainer = *tfit;
  profile.max_active_sequences = 256;
  std::printf("rollout pass = %.3g s + %.3g s/row + %.3g s/token + %.3g s/adapter\n",
              profile.rollout.c[0], profile.rollout.c[1], profile.rollout.c[2],
              profile.rollout.c[3]);
  std::printf("trainer step = %.3g s + %.3g s/row + %.3g s/padded token + %.3g s/tenant\n",
              profile.trainer.c[0], profile.trainer.c[1], profile.trainer.c[2],
              profile.trainer.c[3]);
  if (!profile_path.empty()) {
    Status st = WriteFileAtomically(profile_path, sim::CostProfileToJson(profile) + "\n");
    if (!st.ok()) {
      std::fprintf(stderr, "bench_model_profile: %s\n", st.ToString().c_str());
      return 1;
    }
    std::printf("wrote %s\n", profile_path.c_str());
  }
  // Targets: the largest decode pass as the fit predicts it, and batching against one row.
  std::vector<Target> targets;
  const PassRow* largest = nullptr;
  const PassRow* single = nullptr;
  for (const PassRow& p : passes) {
    if (largest == nullptr || p.rows * 100 + p.adapters > largest->rows * 100 + largest->adapters)
      largest = &p;
    if (p.rows == 1 && (single == nullptr || p.prompt < single->prompt)) single = &p;
  }
  if (largest != nullptr && largest->decode_ms > 0) {
    const double predicted =
        profile.rollout.Seconds(largest->rows, largest->rows, largest->adapters, false) * 1e3;
    targets.push_back({"rollout fit / measured, decode pass of " + std::to_string(largest->rows) +
                           " rows, " + std::to_string(largest->adapters) + " adapters (within 25%)",
                       std::abs(predicted / largest->decode_ms - 1.0), 0.25, false});
  }
  if (largest != nullptr && single != nullptr && single->decode_ms > 0) {
    targets.push_back({"decode pass of " + std::to_string(largest->rows) + " rows / " +
                           std::to_string(largest->rows) + " one-row passes",
                       largest->decode_ms / (largest->rows * single->decode_ms), 1.0, false});
  }
  return FinishBench(args, objects, targets);
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Run(argc, argv); }

// bench_train_step: the trainer's GRPO step (rl::MultiTenantStep) on the built-in tiny base's
// shape (random weights, LoRA rank 8 on every target), one compute thread: milliseconds per step
// and trained tokens/s for a batch of R rows of L tokens (half prompt, half completion), split
// over T tenants. It tells where the trainer's time goes as batches grow. Rows may come in GRPO
// groups of G whose prompt is the same (rl::MultiTenantStep computes it once; "shared" no:
// computed per row, as before prompt sharing). Targets: every plain shape split over several
// tenants within 1.5x of the same rows for one tenant (256 rows of 16 and 64 over 8 and 32
// tenants; 128 rows of 8 over 32, the pipeline's small steps); 256 rows of 64 tokens in groups of
// 4 with the prompt shared at most 0.8x the time of the same step unshared. Exit 1 when a full run
// misses one. MARLAAS_BENCH_TRACE=FILE also writes a chrome trace of one step per shape, to
// FILE.<tenants>x<rows>x<len> (suffix s/u: grouped, prompt shared or not).
//
//   bench_train_step [--json FILE] [--quick]
#include <torch/csrc/autograd/profiler_legacy.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench/report.h"
#include "model/compute_threads.h"
#include "model/pretrain.h"
#include "rl/multi_tenant_step.h"

namespace marlaas::bench {
namespace {

struct Row {
  int tenants, rows, len, group;
  bool shared;
  double ms_per_step, tokens_per_s;
};

Row Measure(const std::shared_ptr<const model::BaseWeights>& w, int tenants, int rows, int len,
            int group, bool shared, int reps) {
  const model::Transformer model(w);
  std::vector<std::unique_ptr<model::LoraAdapter>> adapters;
  std::vector<std::unique_ptr<torch::optim::AdamW>> opts;
  std::vector<rl::TenantStep> steps(static_cast<size_t>(tenants));
  std::mt19937 rng(7);
  for (int t = 0; t < tenants; ++t) {
    auto a = model::LoraAdapter::Create(*w, 8, 16.0f, 0x7f, uint64_t(t + 1));
    adapters.push_back(std::make_unique<model::LoraAdapter>(std::move(*a)));
    adapters.back()->flat().set_requires_grad(true);
    opts.push_back(std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{adapters.back()->flat()}, torch::optim::AdamWOptions(1e-3)));
    steps[size_t(t)].adapter = adapters.back().get();
    steps[size_t(t)].optimizer = opts.back().get();
  }
  std::vector<std::vector<int32_t>> prompt(static_cast<size_t>(tenants));
  for (int r = 0; r < rows; ++r) {
    // Rows r, r + tenants, ... go to tenant r % tenants: a group is `group` consecutive rows of
    // it, with one prompt.
    std::vector<int32_t>& p = prompt[size_t(r % tenants)];
    if (group > 0 && (r / tenants) % group == 0) {
      p.clear();
      for (int j = 0; j < len / 2; ++j)
        p.push_back(int32_t(rng() % uint32_t(w->config.vocab_size)));
    }
    rl::Completion c;
    for (int j = 0; j < len; ++j) {
      c.tokens.push_back(group > 0 && j < len / 2
                             ? p[size_t(j)]
                             : int32_t(rng() % uint32_t(w->config.vocab_size)));
      c.loss_mask.push_back(j >= len / 2 ? 1 : 0);
      c.behaviour_logprobs.push_back(j >= len / 2 ? -3.0f : 0.0f);
    }
    c.advantage = float(int(rng() % 3) - 1);
    steps[size_t(r % tenants)].completions.push_back(std::move(c));
  }
  rl::MultiTenantStep(model, steps, shared);                     // warm-up
  if (const char* trace = std::getenv("MARLAAS_BENCH_TRACE")) {  // a chrome trace of one step
    const std::string trace_path = std::string(trace) + "." + std::to_string(tenants) + "x" +
                                   std::to_string(rows) + "x" + std::to_string(len) +
                                   (group > 0 ? (shared ? "s" : "u") : "");
    torch::autograd::profiler::RecordProfile guard(trace_path);
    rl::MultiTenantStep(model, steps, shared);
  }
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    rl::MultiTenantStep(model, steps, shared);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  const double p50 = Percentile(ms, 50);
  return {tenants, rows, len, group, shared, p50, double(rows) * len / (p50 / 1000)};
}

int Run(int argc, char** argv) {
  BenchArgs args;
  if (!ParseBenchArgs(argc, argv, "bench_train_step [--json FILE] [--quick]", &args)) return 2;
  model::SetComputeThreads(1);
  auto w = model::BaseWeights::Random(model::TinyConfig(), 1);
  const int reps = args.quick ? 2 : 5;
  std::vector<Row> rows;
  struct Shape {
    int tenants, rows, len, group = 0;
    bool shared = true;
  };
  const std::vector<Shape> shapes =
      args.quick ? std::vector<Shape>{{1, 16, 16},
                                      {4, 16, 16},
                                      {4, 16, 16, 4, true},
                                      {4, 16, 16, 4, false}}
                 : std::vector<Shape>{{1, 16, 16},           {1, 64, 16},
                                      {1, 256, 16},          {1, 16, 64},
                                      {1, 64, 64},           {1, 256, 64},
                                      {8, 256, 16},          {8, 256, 64},
                                      {8, 256, 64, 4, true}, {8, 256, 64, 4, false},
                                      {32, 256, 16},         {1, 128, 8},
                                      {32, 128, 8}};
  std::printf("%8s %6s %5s %6s %7s %12s %12s\n", "tenants", "rows", "len", "group", "shared",
              "ms/step", "tokens/s");
  std::vector<std::string> objects;
  for (const Shape& s : shapes) {
    const Row r = Measure(w, s.tenants, s.rows, s.len, s.group, s.shared, reps);
    rows.push_back(r);
    std::printf("%8d %6d %5d %6d %7s %12.1f %12.0f\n", r.tenants, r.rows, r.len, r.group,
                r.group == 0 ? "-"
                : r.shared   ? "yes"
                             : "no",
                r.ms_per_step, r.tokens_per_s);
    std::fflush(stdout);
    objects.push_back("{\"tenants\":" + std::to_string(r.tenants) +
                      ",\"rows\":" + std::to_string(r.rows) + ",\"len\":" + std::to_string(r.len) +
                      ",\"group\":" + std::to_string(r.group) +
                      ",\"shared\":" + (r.shared ? "true" : "false") +
                      ",\"ms_per_step\":" + JsonNumber(r.ms_per_step) +
                      ",\"tokens_per_s\":" + JsonNumber(r.tokens_per_s) + "}");
  }
  // The multi-tenant step must not grow with the number of tenants sharing a batch (a narrow per
  // tenant once made a 32-tenant step ~6x one tenant's; with 4 short rows a tenant, the LoRA ops
  // of each tenant's every projection made it 2x): the same rows and length split over many
  // tenants against one tenant, for every such pair of shapes.
  std::vector<std::pair<const Row*, const Row*>> split;  // (many tenants, one tenant)
  for (const Row& many : rows) {
    if (many.group != 0 || many.tenants == 1) continue;
    for (const Row& r : rows)
      if (r.group == 0 && r.tenants == 1 && r.rows == many.rows && r.len == many.len)
        split.emplace_back(&many, &r);
  }
  // Prompt sharing: the grouped shape shared against the same shape unshared.
  const Row *with = nullptr, *without = nullptr;
  for (const Row& r : rows) {
    if (r.group > 0 && r.shared) with = &r;
    if (r.group > 0 && !r.shared) without = &r;
  }
  std::vector<Target> targets;
  if (with != nullptr && without != nullptr) {
    targets.push_back({"prompt shared / not, ms per step (" + std::to_string(with->rows) +
                           " rows of " + std::to_string(with->len) + " in groups of " +
                           std::to_string(with->group) + ")",
                       with->ms_per_step / without->ms_per_step, 0.8, false});
  }
  for (const auto& [many, one] : split) {
    targets.push_back({std::to_string(many->tenants) + " tenants / 1 tenant, ms per step (" +
                           std::to_string(many->rows) + " rows of " + std::to_string(many->len) +
                           ")",
                       many->ms_per_step / one->ms_per_step, 1.5, false});
  }
  return FinishBench(args, objects, targets);
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Run(argc, argv); }

// `marlaas pretrain --out DIR [--seed N] [--steps N] [--threads N]`: the built-in tiny base,
// trained on the built-in tasks' corpus, written in Hugging Face layout; cached (same options and
// corpus: nothing to do). Reports the greedy exact-match rate on held-out problems.
#include <cstdio>
#include <string>

#include "model/compute_threads.h"
#include "model/evaluate.h"
#include "model/pretrain.h"
#include "procs/cli/cli.h"
#include "tasks/task.h"

namespace marlaas::cli {
namespace {

void ProgressBar(const model::PretrainProgress& p) {
  const int width = 30, filled = p.step * width / p.steps;
  std::fprintf(stderr, "\r[%s%s] step %d/%d  loss %.3f  %.0f tokens/s ",
               std::string(size_t(filled), '#').c_str(),
               std::string(size_t(width - filled), '.').c_str(), p.step, p.steps, double(p.loss),
               p.tokens_per_s);
  if (p.step == p.steps) std::fprintf(stderr, "\n");
}

}  // namespace

int RunPretrain(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string out;
  if (!TakeFlag(&args, "--out", &out)) {
    std::fprintf(stderr,
                 "usage: marlaas pretrain --out DIR [--seed N] [--steps N] [--threads N]\n");
    return 2;
  }
  long long seed = 0, steps = 0, threads = 0;  // 0: the default steps; threads as MARLAAS_THREADS
  if (!TakeInteger(&args, "pretrain", "--seed", 0, 1ll << 62, &seed) ||
      !TakeInteger(&args, "pretrain", "--steps", 1, 10'000'000, &steps) ||
      !TakeInteger(&args, "pretrain", "--threads", 1, 256, &threads))
    return 2;
  if (int rc = RejectRest("pretrain", args)) return rc;
  model::SetComputeThreads(int(threads));
  model::PretrainOptions o;
  o.out_dir = out;
  o.seed = uint64_t(seed);
  if (steps > 0) o.steps = int(steps);
  o.on_progress = ProgressBar;
  // The built-in tasks' documents, mostly right and mostly difficulty 1: the base model learns
  // the formats and some of the skills, leaving reward for RL to gain.
  const auto corpus = tasks::TinyBaseCorpus(o.seed);
  auto report = model::Pretrain(o, corpus);
  if (!report.ok()) {
    std::fprintf(stderr, "marlaas pretrain: %s\n", report.status().message().c_str());
    return 1;
  }
  if (report->cached) {
    std::printf("cached: %s already holds this checkpoint (loss %.3f -> %.3f)\n", out.c_str(),
                double(report->first_loss), double(report->final_loss));
  } else {
    std::printf("trained %d steps in %.1f s (%.0f tokens/s): loss %.3f -> %.3f; wrote %s\n",
                o.steps, report->seconds, report->tokens_per_s, double(report->first_loss),
                double(report->final_loss), out.c_str());
  }
  // The base model's reward on held-out examples of each task (greedy): the starting point RL
  // must improve on.
  // A quick check at difficulties 1-3, without running tools (the calculator's answers come after
  // its tool's result, so it scores 0 here): `marlaas sample` measures the rates the README lists
  // (difficulty 1, tools run).
  std::printf(
      "greedy reward of the base on 40 held-out examples per task (difficulties 1-3, tools not "
      "run; `marlaas sample --task T --temperature 0` runs them):\n");
  for (const std::string& name : tasks::BuiltinTaskNames()) {
    auto task = std::move(*tasks::MakeTask(name));
    std::vector<tasks::TaskExample> examples;
    std::vector<std::string> prompts;
    for (uint64_t i = 0; i < 40; ++i) {
      examples.push_back(task->Example(o.seed + 1000003, i, 1 + int(i % 3)));
      prompts.push_back(examples.back().prompt);
    }
    auto completions = model::GreedyCompletions(out, prompts, 48);
    if (!completions.ok()) {
      std::fprintf(stderr, "marlaas pretrain: evaluating: %s\n",
                   completions.status().message().c_str());
      return 1;
    }
    std::vector<const tasks::TaskExample*> ptrs;
    for (const tasks::TaskExample& e : examples) ptrs.push_back(&e);
    double reward = 0;
    for (const sandbox::Verdict& v : task->VerifyAll(ptrs, *completions)) reward += v.reward;
    std::printf("  %-18s %.2f\n", name.c_str(), reward / double(examples.size()));
  }
  return 0;
}

}  // namespace marlaas::cli

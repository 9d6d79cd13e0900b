// `marlaas demo`: the main job on the embedded default. Pretrains the tiny base on first run
// (cached in the state dir), measures each tenant's held-out reward with its untrained adapter,
// trains N tenants (default 8, two per built-in task, different seeds and hyperparameters) on
// the service with a live table, measures the held-out reward again from each tenant's final
// checkpoint, and writes a report folder: summary.json, rewards.svg (per-tenant reward curves),
// utilization.svg (engine utilisation over time) and table.txt.
//
// Evaluation (base_reward, final_reward): greedy decoding on the tenant's first 256 held-out
// examples (a prompt stream training never sees), tools executed, scored by the task's verifier
// (procs/common/evaluation.h). 256, not fewer: the acceptance asks for +0.2, and the standard
// error of a mean over 48 right/wrong answers is ~0.07.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/file_util.h"
#include "procs/cli/base_model.h"
#include "procs/cli/cli.h"
#include "procs/cli/run_jobs.h"
#include "procs/cli/svg_chart.h"
#include "procs/common/checkpoint_files.h"
#include "procs/common/evaluation.h"
#include "proto/job_spec.h"

namespace marlaas::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// How each built-in task trains in the demo (held-out greedy reward on 256 prompts). Tuned on the
// base pretrained before 2026-12-06, whose skills differed (README, "Built-in tasks and their
// rates"): arithmetic is learnt fact by fact (200 single-digit facts): 100 steps of 64 prompts
// gained +0.25 to +0.36 from 0.23 (this build's base starts at 0.81 and reaches 0.93-0.95); its
// answers are a few tokens, so many prompts a step are cheap. Countdown gained +0.13 to +0.27 with
// 8 prompts a step, +0.29 and +0.34 with 16 (one run each). Python at difficulty 1 starts at 1.0 on
// this build's base, so difficulty 2 (0.66-0.68 -> 1.0). The calculator's samples are the costliest
// (a tool round trip); on this build's base it learns at difficulty 1 only, and little (0.73-0.80
// -> 0.82-0.85 with 8 or 16 prompts a step; at difficulty 2 and 3, where the earlier base learnt
// 0.36-0.40 -> 0.64-0.86, its reward of 0.02-0.13 fell further): the demo's "gained 0.2 or reached
// 0.9" is not met for it.
constexpr uint32_t kDemoEvalPrompts = 256;

struct DemoTask {
  const char* task;
  uint32_t prompts_per_step;
  uint32_t max_new_tokens;
  float learning_rate[2];  // the first and second tenant of the task
  uint32_t difficulty;
};
constexpr DemoTask kDemoTasks[] = {
    {"arithmetic", 64, 8, {5e-3f, 5e-3f}, 1},
    {"countdown", 16, 40, {2e-3f, 3e-3f}, 1},
    {"python_functions", 4, 40, {2e-3f, 3e-3f}, 2},
    {"calculator_tool", 8, 40, {3e-3f, 2e-3f}, 1},
};

// Tenant k of the demo: tasks in turn, seeds and hyperparameters varied.
pb::JobSpec DemoJob(int k, int steps) {
  const DemoTask& t = kDemoTasks[k % 4];
  pb::JobSpec j;
  j.set_task(t.task);
  j.set_tenant(std::string(t.task).substr(0, 5) + "-" + std::to_string(k));
  j.mutable_dataset()->set_seed(uint64_t(101 + k));
  j.mutable_dataset()->set_difficulty(t.difficulty);
  j.mutable_dataset()->set_eval_prompts(kDemoEvalPrompts);
  j.mutable_optimizer()->set_learning_rate(t.learning_rate[(k / 4) % 2]);
  j.mutable_optimizer()->set_schedule("cosine");
  j.mutable_optimizer()->set_warmup_steps(5);
  j.mutable_lora()->set_rank(k / 4 % 2 ? 16 : 8);
  j.mutable_sampling()->set_temperature(1.0f);
  j.mutable_sampling()->set_max_new_tokens(t.max_new_tokens);
  j.mutable_sampling()->set_seed(uint64_t(7 + k));
  j.set_group_size(8);
  j.set_prompts_per_step(t.prompts_per_step);
  j.set_max_steps(uint32_t(steps));
  j.set_max_staleness(1);
  j.set_checkpoint_every(10);
  ApplyJobSpecDefaults(&j);
  return j;
}

}  // namespace

int RunDemo(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string state_dir = DefaultStateDir(), summary_path;
  TakeFlag(&args, "--state-dir", &state_dir);
  TakeFlag(&args, "--summary", &summary_path);
  long long tenants = 8, steps = 100, threads = 1;
  double timeout_s = 3600;
  if (!TakeInteger(&args, "demo", "--tenants", 1, 64, &tenants) ||
      !TakeInteger(&args, "demo", "--steps", 1, 100000, &steps) ||
      !TakeInteger(&args, "demo", "--threads", 1, 64, &threads) ||
      !TakeNumber(&args, "demo", "--timeout-s", 1, 1e9, &timeout_s))
    return 2;
  const bool weak = TakeSwitch(&args, "--allow-weak-sandbox");
  const bool quiet = TakeSwitch(&args, "--quiet");
  if (int rc = RejectRest("demo", args)) return rc;
  // The summary is checked before the minutes of training. Not inside the state dir: that holds
  // the base model, the runs and their reports (a summary written over the base's config.json
  // broke every later demo), and each report has its summary.json already.
  const auto inside = [](const std::string& path, const std::string& dir) {
    std::error_code ec;
    const std::string p = fs::weakly_canonical(fs::absolute(path), ec).string();
    const std::string d = fs::weakly_canonical(fs::absolute(dir), ec).string();
    return p.size() > d.size() && p.compare(0, d.size(), d) == 0 && p[d.size()] == '/';
  };
  if (!summary_path.empty()) {
    if (inside(summary_path, state_dir)) {
      std::fprintf(stderr,
                   "marlaas demo: --summary %s is inside the state dir %s, which holds the base "
                   "model and the runs (each report there has its summary.json): give a path "
                   "outside it\n",
                   summary_path.c_str(), state_dir.c_str());
      return 2;
    }
    if (Status st = CheckOutputFile("--summary", summary_path); !st.ok()) {
      std::fprintf(stderr, "marlaas demo: %s\n", st.message().c_str());
      return 2;
    }
  }
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  state_dir = fs::absolute(state_dir).string();
  // The run's own state dir, made before the minutes of pretraining and evaluation (a state dir
  // that could not take it failed only after them). Its name has the pid: two demos started in
  // the same second on one state dir took the same one, and the second was refused.
  const std::string run_id =
      "demo-" + std::to_string(time(nullptr)) + "-" + std::to_string(getpid());
  const std::string run_dir = state_dir + "/runs/" + run_id;
  fs::create_directories(run_dir, ec);
  if (ec) {
    std::fprintf(stderr, "marlaas demo: creating %s: %s\n", run_dir.c_str(), ec.message().c_str());
    return 1;
  }
  double pretrain_s = 0;
  bool cached = false;
  auto model_dir = EnsureTinyBase(state_dir, &pretrain_s, &cached);
  if (!model_dir.ok()) {
    std::fprintf(stderr, "marlaas demo: %s\n", model_dir.status().message().c_str());
    return 1;
  }
  std::printf("base model: %s (%s, %.1f s)\n", model_dir->c_str(),
              cached ? "cached" : "pretrained now", pretrain_s);

  const auto t0 = std::chrono::steady_clock::now();
  RunJobsOptions o;
  o.service.stage.instance = "demo" + std::to_string(getpid());
  o.service.stage.state_dir = run_dir;
  o.service.stage.model_dir = *model_dir;
  o.service.stage.threads = int(threads);
  o.service.stage.allow_weak_sandbox = weak;
  o.timeout_s = timeout_s;
  o.quiet = quiet;
  for (int k = 0; k < int(tenants); ++k) o.jobs.push_back(DemoJob(k, int(steps)));

  // Evaluations run on every core: they come before and after training, not during it.
  const int eval_workers = int(std::max(1u, std::thread::hardware_concurrency()));
  std::map<std::string, double> base_reward;
  std::printf("held-out reward of the untrained adapters (greedy, %d prompts each):\n",
              int(o.jobs[0].dataset().eval_prompts()));
  std::fflush(stdout);
  const auto eval0 = std::chrono::steady_clock::now();
  std::vector<pipeline::EvalJob> base_jobs;
  for (const pb::JobSpec& j : o.jobs) base_jobs.push_back({j, ""});
  const auto base_results = pipeline::EvaluateHeldOutAll(*model_dir, base_jobs, eval_workers);
  for (size_t k = 0; k < o.jobs.size(); ++k) {
    const pb::JobSpec& j = o.jobs[k];
    const auto& r = base_results[k];
    if (!r.ok()) {
      std::fprintf(stderr, "marlaas demo: evaluating %s: %s\n", j.tenant().c_str(),
                   r.status().message().c_str());
      return 1;
    }
    base_reward[j.tenant()] = r->mean_reward;
    std::printf("  %-14s %-16s %.3f\n", j.tenant().c_str(), j.task().c_str(), r->mean_reward);
  }
  double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - eval0).count();
  std::fflush(stdout);

  auto report = RunJobs(o);
  // Stopped early, the tenants are in the run's own state dir, not the demo's: say where, and
  // how to go on with them.
  const std::string resume = "its tenants are in " + run_dir + "; `marlaas serve --state-dir " +
                             run_dir + " --model-dir " + *model_dir +
                             "` resumes them (a new demo starts a new run)";
  if (!report.ok()) {
    if (report.status().code() == StatusCode::kCancelled) {
      std::fprintf(stderr, "marlaas demo: interrupted: %s\n", resume.c_str());
      return 130;  // as serve
    }
    std::fprintf(stderr, "marlaas demo: %s\n", report.status().message().c_str());
    return 1;
  }
  if (report->timed_out)
    std::fprintf(stderr, "marlaas demo: stopped at --timeout-s: %s\n", resume.c_str());
  const std::string report_dir = state_dir + "/reports/" + run_id;
  fs::create_directories(report_dir, ec);
  json summary = {{"wall_s", 0.0},
                  {"utilization",
                   {{"rollout", report->rollout_util},
                    {"trainer", report->trainer_util},
                    {"verifier", report->verifier_util}}},
                  {"pretrain_s", pretrain_s},
                  {"train_wall_s", report->wall_s},
                  {"stage_restarts", report->stage_restarts},
                  {"timed_out", report->timed_out},
                  {"tenants", json::array()}};
  // Each tenant's latest checkpoint; a tenant without one (it never finished a checkpointed
  // step) keeps its base reward.
  std::vector<pipeline::EvalJob> final_jobs;
  std::vector<size_t> final_of(o.jobs.size(), SIZE_MAX);
  for (size_t k = 0; k < o.jobs.size(); ++k) {
    auto latest = pipeline::LatestCheckpointDir(
        pipeline::TenantDir(o.service.stage.state_dir, o.jobs[k].tenant()));
    if (!latest.ok()) continue;
    final_of[k] = final_jobs.size();
    final_jobs.push_back({o.jobs[k], *latest});
  }
  const auto eval1 = std::chrono::steady_clock::now();
  const auto final_results = pipeline::EvaluateHeldOutAll(*model_dir, final_jobs, eval_workers);
  eval_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - eval1).count();
  summary["eval_s"] = eval_s;
  std::vector<ChartSeries> curves;
  bool all_improved = true;
  std::string table = "tenant          task              steps  base   final  gain\n";
  for (size_t k = 0; k < o.jobs.size(); ++k) {
    const pb::JobSpec& j = o.jobs[k];
    const std::string dir = pipeline::TenantDir(o.service.stage.state_dir, j.tenant());
    uint64_t steps_done = 0;
    for (const serve::TenantView& t : report->tenants)
      if (j.tenant() == t.record.id) steps_done = t.trainer.steps;
    double final_reward = base_reward[j.tenant()];
    if (final_of[k] != SIZE_MAX) {
      const auto& r = final_results[final_of[k]];
      if (r.ok()) {
        final_reward = r->mean_reward;
      } else {
        std::fprintf(stderr, "marlaas demo: evaluating %s's final adapter: %s\n",
                     j.tenant().c_str(), r.status().message().c_str());
        all_improved = false;
      }
    }
    const double base = base_reward[j.tenant()];
    all_improved &= final_reward >= base + 0.2 || final_reward >= 0.9;
    summary["tenants"].push_back({{"id", j.tenant()},
                                  {"task", j.task()},
                                  {"steps", steps_done},
                                  {"base_reward", base},
                                  {"final_reward", final_reward}});
    char line[160];
    std::snprintf(line, sizeof(line), "%-15s %-16s %6llu  %.3f  %.3f  %+.3f\n", j.tenant().c_str(),
                  j.task().c_str(), (unsigned long long)steps_done, base, final_reward,
                  final_reward - base);
    table += line;
    ChartSeries s{j.tenant(), {}};
    std::ifstream steps_log(dir + "/steps.jsonl");
    std::map<double, double> by_step;  // a replayed step after a restart overwrites
    for (std::string l; std::getline(steps_log, l);) {
      json e = json::parse(l, nullptr, false);
      if (e.is_object()) by_step[e.value("step", 0.0)] = e.value("reward_mean", 0.0);
    }
    for (auto [x, y] : by_step) s.points.emplace_back(x, y);
    curves.push_back(std::move(s));
  }
  summary["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<ChartSeries> util = {{"rollout", {}}, {"trainer", {}}, {"verifier", {}}};
  for (const serve::UtilSample& u : report->timeline) {
    util[0].points.emplace_back(u.t_s, u.rollout);
    util[1].points.emplace_back(u.t_s, u.trainer);
    util[2].points.emplace_back(u.t_s, u.verifier);
  }
  Status st = WriteFileAtomically(report_dir + "/summary.json", summary.dump(2) + "\n");
  if (st.ok())
    st = WriteFileAtomically(
        report_dir + "/rewards.svg",
        LineChartSvg("mean training reward per step", "step", "reward (sampled)", curves));
  if (st.ok())
    st = WriteFileAtomically(report_dir + "/utilization.svg",
                             LineChartSvg("engine utilisation", "seconds", "busy fraction", util));
  if (st.ok()) st = WriteFileAtomically(report_dir + "/table.txt", table);
  if (st.ok() && !summary_path.empty())
    st = WriteFileAtomically(summary_path, summary.dump(2) + "\n");
  if (!st.ok()) {
    std::fprintf(stderr, "marlaas demo: writing the report: %s\n", st.message().c_str());
    return 1;
  }
  std::printf(
      "\n%s\nutilisation: rollout %.0f%%, trainer %.0f%%; pretraining %.1f s, training wall "
      "%.1f s, held-out evaluations %.1f s\n",
      table.c_str(), 100 * report->rollout_util, 100 * report->trainer_util, pretrain_s,
      report->wall_s, eval_s);
  std::printf("report: %s\n%s\n", report_dir.c_str(),
              all_improved ? "every tenant improved by >= 0.2 (or reached 0.9)"
                           : "NOT every tenant improved by 0.2");
  return report->timed_out ? 1 : 0;
}

}  // namespace marlaas::cli

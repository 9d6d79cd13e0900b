#include "bench/pipeline_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "base/deadline.h"
#include "base/file_util.h"
#include "procs/common/checkpoint_files.h"
#include "procs/common/evaluation.h"
#include "procs/common/pipeline.h"
#include "procs/serve/monitor.h"
#include "procs/serve/service.h"
#include "proto/job_spec.h"

namespace marlaas::bench {
namespace {

namespace fs = std::filesystem;

bool IsSync(const std::string& mode) { return mode != "async"; }

// The latest checkpoint folder of a tenant, or "" when it has none.
std::string LatestCheckpoint(const std::string& state_dir, const std::string& tenant) {
  auto latest = pipeline::LatestCheckpointDir(pipeline::TenantDir(state_dir, tenant));
  return latest.ok() ? *latest : "";
}

}  // namespace

std::vector<pb::JobSpec> BenchJobs(int tenants, int steps, uint64_t seed, int eval_prompts) {
  static const char* kTasks[] = {"arithmetic", "countdown", "python_functions", "calculator_tool"};
  std::vector<pb::JobSpec> jobs;
  for (int k = 0; k < tenants; ++k) {
    pb::JobSpec j;
    j.set_tenant("t" + std::to_string(k));
    j.set_task(kTasks[k % 4]);
    j.mutable_dataset()->set_seed(1000 * seed + uint64_t(k) + 1);
    j.mutable_dataset()->set_difficulty(1);
    j.mutable_dataset()->set_eval_prompts(uint32_t(eval_prompts));
    j.mutable_optimizer()->set_learning_rate(3e-3f);
    j.mutable_sampling()->set_max_new_tokens(40);
    j.mutable_sampling()->set_seed(1000 * seed + uint64_t(k) + 7);
    j.set_group_size(4);
    j.set_prompts_per_step(2);
    j.set_max_steps(uint32_t(steps));
    j.set_max_staleness(1);
    j.set_checkpoint_every(uint32_t(std::max(1, steps)));
    ApplyJobSpecDefaults(&j);
    jobs.push_back(j);
  }
  return jobs;
}

sim::MeasuredRun ToMeasuredRun(const PipelineRun& run) {
  sim::MeasuredRun m;
  m.mode = run.mode;
  m.tenants = run.tenants;
  m.seed = run.seed;
  m.complete = run.complete;
  m.wall_s = run.wall_s;
  m.util_rollout = run.util_rollout;
  m.util_trainer = run.util_trainer;
  for (const pb::JobSpec& j : run.jobs) m.tasks.push_back(j.task());
  if (!run.jobs.empty()) {
    const pb::JobSpec& j = run.jobs.front();
    m.steps = int(j.max_steps());
    m.group_size = int(j.group_size());
    m.prompts_per_step = int(j.prompts_per_step());
    m.max_staleness = int(j.max_staleness());
    m.checkpoint_every = int(j.checkpoint_every());
  }
  m.verifier_workers = run.verifier_workers;
  m.env_latency_ms = run.env_latency_ms;
  m.costs = run.costs;
  return m;
}

Result<PipelineRun> RunPipelineMode(const std::string& mode, int tenants, uint64_t seed,
                                    const PipelineBenchOptions& o) {
  if (std::find(PipelineModes().begin(), PipelineModes().end(), mode) == PipelineModes().end())
    return Status(StatusCode::kInvalidArgument, "unknown pipeline mode '" + mode + "'");
  if (tenants < 1 || tenants > kMaxTenants) {
    return Status(StatusCode::kInvalidArgument, "tenants must be 1-" + std::to_string(kMaxTenants));
  }
  static int runs = 0;
  const std::string name = mode + "-" + std::to_string(tenants) + "-s" + std::to_string(seed) +
                           "-" + std::to_string(getpid()) + "-" + std::to_string(runs++);
  serve::ServiceOptions so;
  so.stage.instance = "bench" + std::to_string(getpid()) + "r" + std::to_string(runs);
  so.stage.state_dir = o.work_dir + "/" + name;
  so.stage.model_dir = o.model_dir;
  so.stage.threads = o.threads;
  so.stage.verifier_workers = o.verifier_workers;
  so.stage.lockstep = IsSync(mode);
  so.stage.env_latency_ms = o.env_latency_ms;
  so.bin_dir = o.bin_dir;
  so.max_tenants = tenants;
  std::vector<pb::JobSpec> jobs = BenchJobs(tenants, o.steps, seed, o.eval_prompts);
  if (IsSync(mode))
    for (pb::JobSpec& j : jobs) j.set_max_staleness(0);

  if (pipeline::StopRequested()) return Status(StatusCode::kCancelled, "interrupted");
  std::error_code ec;
  fs::remove_all(so.stage.state_dir, ec);
  // A run that fails keeps its state dir (its stages' logs say why) and the error names it; one
  // that finishes or is interrupted leaves nothing (the service's destructor stops its stages
  // and removes its segments on every path).
  struct StateDir {
    std::string path;
    bool remove = false;
    ~StateDir() {
      std::error_code e;
      if (remove) fs::remove_all(path, e);
    }
  } state{so.stage.state_dir};
  auto failed = [&](const Status& st) {
    return Status(st.code(), st.message() + " (its state is kept in " + state.path + ")");
  };
  Result<std::unique_ptr<serve::Service>> started = serve::Service::Start(so);
  if (!started.ok()) return failed(started.status());
  std::unique_ptr<serve::Service> service = std::move(*started);
  // The clock starts with the first admission, once every stage has loaded the base and entered
  // its loop: process start-up is the same in every mode and no part of a tenant's training.
  if (Status st = service->WaitUntilReady(60'000); !st.ok()) return failed(st);
  auto interrupted = [&] {
    state.remove = true;
    return Status(StatusCode::kCancelled, "interrupted");
  };
  if (pipeline::StopRequested()) return interrupted();
  PipelineRun run;
  run.mode = mode;
  run.tenants = tenants;
  run.seed = seed;
  serve::Monitor monitor;
  size_t admitted = 0;
  // Admitting is part of the run (the clock has started): timed for the simulator.
  auto admit = [&]() -> Status {
    const int64_t t0 = MonotonicNanos();
    if (Status st = service->Admit(jobs[admitted]); !st.ok()) return failed(st);
    run.costs.admit_ns += uint64_t(MonotonicNanos() - t0);
    ++run.costs.admissions;
    ++admitted;
    return Status::Ok();
  };
  if (mode == "sequential_sync") {
    MARLAAS_RETURN_IF_ERROR(admit());
  } else {
    // At one moment: one by one, a lockstep rollout polling every 0.5 ms started its first round
    // with the tenants admitted so far, and the rest trained a round behind.
    const int64_t t0 = MonotonicNanos();
    if (Status st = service->AdmitTogether(jobs); !st.ok()) return failed(st);
    run.costs.admit_ns += uint64_t(MonotonicNanos() - t0);
    run.costs.admissions += jobs.size();
    admitted = jobs.size();
  }
  // The service loop looks every 2 ms (a tick reads the tenant table and metrics: microseconds),
  // so the end of a run, and in sequential_sync each next admission, is seen within 2 ms: at
  // 20 ms the run's end was uncertain by up to 8% of a 1-tenant run. The monitor samples the
  // engines every 20 ms (its timeline) and once at the end.
  bool timed_out = false;
  int64_t next_sample = 0;
  for (;;) {
    if (pipeline::StopRequested()) return interrupted();  // SIGINT/SIGTERM (the CLI's handlers)
    service->Tick();
    // The stages gave up (a stage that keeps crashing): a failed run, not one that times out.
    if (!service->failure().ok()) return failed(service->failure());
    if (MonotonicNanos() >= next_sample) {
      monitor.Sample(*service);
      next_sample = MonotonicNanos() + 20'000'000;
    }
    if (service->AllDone()) {
      if (admitted == jobs.size()) break;
      MARLAAS_RETURN_IF_ERROR(admit());  // sequential: the previous tenant is done
      continue;
    }
    if (monitor.wall_s() > o.timeout_s) {
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  monitor.Sample(*service);
  run.wall_s = monitor.wall_s();
  run.util_rollout = monitor.Utilization(pipeline::kRolloutRole);
  run.util_verifier = monitor.Utilization(pipeline::kVerifierRole);
  run.util_trainer = monitor.Utilization(pipeline::kTrainerRole);
  run.complete = !timed_out;
  run.jobs = jobs;
  run.verifier_workers = o.verifier_workers;
  run.env_latency_ms = o.env_latency_ms;
  for (const serve::StageView& s : service->Stages()) {
    if (s.role == pipeline::kRolloutRole) run.costs.rollout = s.engine.cost;
    if (s.role == pipeline::kTrainerRole) {
      run.costs.trainer = s.engine.cost;
      run.costs.checkpoints = s.engine.checkpoints;
      run.costs.checkpoint_ns = s.engine.checkpoint_ns;
    }
  }
  run.costs.settles = service->settled();
  run.costs.settle_ns = service->settle_ns();
  for (const serve::TenantView& v : service->Tenants()) {
    for (const pb::JobSpec& j : jobs) {
      if (j.tenant() != v.record.id) continue;
      sim::TaskCostSums& c = run.costs.tasks[j.task()];
      ++c.tenants;
      c.groups_started += v.rollout.cursor;
      c.prompt_tokens += v.rollout.prompt_tokens;
      c.completions += v.rollout.samples;
      c.completion_tokens += v.rollout.tokens;
      c.groups_scored += v.verifier.groups;
      c.work_ns += v.verifier.work_ns;
      c.tool_calls += v.verifier.tool_calls;
      c.tool_ns += v.verifier.tool_ns;
      c.tool_calls_shared += v.rollout.tool_calls_shared;
      c.groups_trained += v.trainer.groups;
      c.groups_degenerate += v.trainer.groups_degenerate;
      c.rows_trained += v.trainer.samples;
      c.tokens_trained += v.trainer.tokens;
      c.padded_tokens_trained += v.trainer.padded_tokens;
      c.prefix_rows_trained += v.trainer.prefix_rows;
      c.prefix_tokens_trained += v.trainer.prefix_tokens;
    }
    run.samples += v.verifier.samples;
    run.groups_dropped += v.trainer.groups_dropped;
    for (int b = 0; b < kStalenessBuckets; ++b) run.staleness[size_t(b)] += v.trainer.staleness[b];
    if (v.record.state != TenantState::kFinished || v.trainer.steps < uint64_t(o.steps))
      run.complete = false;
  }
  if (service->Tenants().size() != jobs.size()) run.complete = false;
  for (const serve::StageView& s : service->Stages()) run.stage_restarts += s.restarts;
  run.samples_per_s = run.wall_s > 0 ? double(run.samples) / run.wall_s : 0;
  service->Stop();
  service.reset();

  // Quality: the held-out greedy reward of every tenant's last checkpoint (not timed).
  double sum = 0;
  for (const pb::JobSpec& j : jobs) {
    if (pipeline::StopRequested()) return interrupted();
    const std::string ckpt = LatestCheckpoint(so.stage.state_dir, j.tenant());
    Result<pipeline::EvalResult> r =
        pipeline::EvaluateHeldOut(o.model_dir, j, ckpt, int(j.dataset().eval_prompts()));
    if (!r.ok()) return failed(r.status().Annotate("evaluating tenant '" + j.tenant() + "'"));
    run.final_rewards.push_back(r->mean_reward);
    sum += r->mean_reward;
  }
  run.final_reward_mean = jobs.empty() ? 0 : sum / double(jobs.size());
  state.remove = !o.keep_state;
  if (!o.quiet) {
    std::printf("  %-17s %3d tenants  seed %llu  %7.1f s  util rollout %.2f trainer %.2f  %s\n",
                mode.c_str(), tenants, (unsigned long long)seed, run.wall_s, run.util_rollout,
                run.util_trainer, run.complete ? "" : "INCOMPLETE");
    std::fflush(stdout);
  }
  return run;
}

}  // namespace marlaas::bench

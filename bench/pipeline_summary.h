// Summary of `marlaas bench pipeline`: the runs of each (mode, tenant count) averaged over seeds
// (and repeats), with the spread of the final reward over seeds (max - min of the seeds' means,
// each seed's repeats averaged first), the ratios of async to sequential_sync measured in the
// same invocation (end-to-end speed-up, engine utilisation), the targets of the issue at 32
// tenants (none when either mode is missing there), a table and the JSON document
// {"runs":[{"mode","tenants","wall_s","util_rollout","util_trainer","samples_per_s",
// "final_reward_mean","final_reward_spread",...}], "ratios":[...], "targets":[...],
// "measured":[...]}.
// Pure functions.
#pragma once

#include <string>
#include <vector>

#include "bench/pipeline_bench.h"
#include "bench/report.h"

namespace marlaas::bench {

struct PipelineRow {
  std::string mode;
  int tenants = 0;
  int seeds = 0;         // distinct seeds among its runs
  int runs = 0;          // seeds x repeats (marlaas bench pipeline --repeats)
  bool complete = true;  // every run of the row finished every tenant's steps
  double wall_s = 0, util_rollout = 0, util_verifier = 0, util_trainer = 0, samples_per_s = 0;
  double idle_fraction = 0;  // 1 - mean of the rollout and trainer utilisation
  double final_reward_mean = 0, final_reward_spread = 0;
  std::vector<double> tenant_reward_mean, tenant_reward_spread;  // per tenant over seeds
  std::array<uint64_t, kStalenessBuckets> staleness{};  // groups trained, summed over its runs
  uint64_t groups_dropped = 0;                          // summed over its runs
};

// async against sequential_sync at one tenant count.
struct PipelineRatio {
  int tenants = 0;
  double speedup = 0;                  // sequential_sync wall / async wall
  double util_ratio = 0;               // async / sequential_sync, mean of rollout and trainer
  double multi_speedup = 0;            // sequential_sync wall / multi_tenant_sync wall (0: not run)
  bool quality_within_spread = false;  // |reward difference| <= the larger spread (or 0.05)
};

struct PipelineSummary {
  std::vector<PipelineRow> rows;
  std::vector<PipelineRatio> ratios;
  std::vector<Target> targets;  // at 32 tenants, when both modes ran there
};

PipelineSummary SummarisePipelineRuns(const std::vector<PipelineRun>& runs);
std::string PipelineTable(const PipelineSummary& s);
// `runs` (every seed's run) go into "measured": their set-up and stage costs, which
// `marlaas bench sim` calibrates from and replays (bench/sim/measured_run.h).
std::string PipelineJson(const PipelineSummary& s, const std::vector<PipelineRun>& runs,
                         double env_latency_ms, int steps);

}  // namespace marlaas::bench

// A measured run of `marlaas bench pipeline` as the simulator sees it: how it was set up, what it
// took, and what its stages cost (the cost sums the stages recorded in their metrics segments).
// The pipeline bench writes these into its JSON ("measured": [...]); `marlaas bench sim` reads
// them back, fits a cost profile from them (CalibrateProfile) and replays every run's set-up in
// the simulator to compare predicted and measured wall time. Pure functions and plain data.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/sim/cost_model.h"
#include "shm/metrics.h"

namespace marlaas::sim {

// Sums over the tenants of one task in one run.
struct TaskCostSums {
  uint64_t tenants = 0;
  uint64_t groups_started = 0, prompt_tokens = 0;      // rollout
  uint64_t completions = 0, completion_tokens = 0;     // rollout
  uint64_t groups_scored = 0, work_ns = 0;             // verifier: scoring
  uint64_t tool_calls = 0, tool_ns = 0;                // verifier: tool calls
  uint64_t groups_trained = 0, groups_degenerate = 0;  // trainer
  uint64_t rows_trained = 0, tokens_trained = 0;       // trainer
  uint64_t padded_tokens_trained = 0;  // trainer: positions computed (shm/metrics.h)
  uint64_t tool_calls_shared = 0;      // rollout: calls with an earlier sibling's context
  // trainer: of padded_tokens_trained, the shared prompts' rows and positions (shm/metrics.h)
  uint64_t prefix_rows_trained = 0, prefix_tokens_trained = 0;
};

struct RunCosts {
  CostSums rollout{}, trainer{};                // trainer steps without their checkpoints
  uint64_t checkpoints = 0, checkpoint_ns = 0;  // trainer: tenant checkpoints and their time
  // The service: tenants admitted and the wall time admitting them took (validating the job,
  // writing its job.json and table row) before the stages could see them.
  uint64_t admissions = 0, admit_ns = 0;
  // The service: tenants settled (finished) and the wall time that took (their final status and
  // state files) before the table, and so the next admission or the run's end, showed it.
  uint64_t settles = 0, settle_ns = 0;
  std::map<std::string, TaskCostSums> tasks;
};

// The most tenants a run or a projection may have: a projection simulates every tenant's every
// step (1024 tenants take about a second, 8192 did not finish in 30 s).
inline constexpr int kMaxSimTenants = 4096;

struct MeasuredRun {
  std::string mode;  // sequential_sync | multi_tenant_sync | async
  int tenants = 0;
  uint64_t seed = 0;
  bool complete = false;
  double wall_s = 0, util_rollout = 0, util_trainer = 0;
  // The set-up (every tenant of a bench run has the same shape; tasks in job order).
  std::vector<std::string> tasks;
  int steps = 0, group_size = 0, prompts_per_step = 0, max_staleness = 0, checkpoint_every = 0;
  int verifier_workers = 0;
  double env_latency_ms = 0;
  RunCosts costs;
};

nlohmann::json MeasuredRunToJson(const MeasuredRun& r);
// Errors name the run (its index in `where`) and the field.
Result<MeasuredRun> MeasuredRunFromJson(const nlohmann::json& j, const std::string& where);

// Each task's costs (tokens, tool calls, verifier time, degenerate share, padded row length) from
// its sums.
std::map<std::string, TaskCost> TaskCostsOf(const std::map<std::string, TaskCostSums>& tasks);

// Adds `from`'s sums to `into`'s (pass fits, checkpoints, each task's sums).
void MergeRunCosts(const RunCosts& from, RunCosts* into);

// The file-writing costs measured in `c` into `p`: seconds per tenant checkpoint, per admission
// and per settle (each writes files with fsync, whose latency differs from run to run and with how
// bursty the writes were: 11.5 ms a checkpoint in the 2-core machine's 1-tenant runs, 6 ms in its
// 32-tenant async runs). A kind `c` has none of keeps p's value.
void ApplyIoCosts(const RunCosts& c, CostProfile* p);

// The cost profile of the machine the runs were measured on ("shared" placement with `cores`):
// the rollout and trainer fits over the pooled cost sums of `runs`, each task's costs from its
// pooled sums. kInvalidArgument when the runs hold too few passes to fit.
Result<CostProfile> CalibrateProfile(const std::vector<MeasuredRun>& runs, int cores,
                                     const std::string& name);

}  // namespace marlaas::sim

// The paper's comparison, measured on one machine in one run (DESIGN.md §7): the same tenants
// (job specs), base model and seeds go through three schedules of the real pipeline processes.
//   sequential_sync    one tenant at a time (the next is admitted when the previous is done),
//                      each step rollout -> verify -> train with nothing overlapped: the stages
//                      run in lockstep (pipeline::StageArgs::lockstep) with staleness 0.
//   multi_tenant_sync  every tenant at once, batched together, the stages still in lockstep
//                      rounds (all tenants sample, then all train).
//   async              the service as built: every tenant at once, no barriers, each tenant's
//                      staleness bound from its job (1).
// A run measures the wall time until every tenant has done its steps, each engine's utilisation
// (busy / wall) over that time, samples per second, the held-out greedy reward of every tenant's
// last checkpoint, the staleness histogram of what was trained and the groups dropped.
// Runs one service at a time; not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "bench/sim/measured_run.h"
#include "proto/marlaas.pb.h"
#include "shm/metrics.h"

namespace marlaas::bench {

inline const std::vector<std::string>& PipelineModes() {
  static const std::vector<std::string> modes = {"sequential_sync", "multi_tenant_sync", "async"};
  return modes;
}

struct PipelineBenchOptions {
  std::string model_dir;  // the base every run uses
  std::string work_dir;   // each run gets a state dir under it (removed unless keep_state)
  std::string bin_dir;    // the stage executables (default: next to this program)
  int steps = 8;          // per tenant
  int eval_prompts = 16;  // held-out prompts per tenant for final_reward
  int threads = 1;
  int verifier_workers = 2;
  int env_latency_ms = 0;   // modelled remote tools (pipeline::StageArgs::env_latency_ms)
  double timeout_s = 1800;  // per run: a run that does not finish by then is reported incomplete
  bool keep_state = false;
  bool quiet = false;
};

struct PipelineRun {
  std::string mode;
  int tenants = 0;
  uint64_t seed = 0;
  bool complete = false;  // every tenant reached its steps within the timeout
  double wall_s = 0;
  double util_rollout = 0, util_verifier = 0, util_trainer = 0;
  uint64_t samples = 0;  // completions scored
  double samples_per_s = 0;
  std::vector<double> final_rewards;  // per tenant, in job order
  double final_reward_mean = 0;
  std::array<uint64_t, kStalenessBuckets> staleness{};  // groups trained, by staleness
  uint64_t groups_dropped = 0;
  int stage_restarts = 0;
  // How the run was set up and what its stages cost: enough for bench/sim to replay it.
  std::vector<pb::JobSpec> jobs;
  int verifier_workers = 0, env_latency_ms = 0;
  sim::RunCosts costs;
};

// The tenants of a run: tenant k takes the built-in tasks in turn, with quick settings (groups
// of 4, 2 prompts a step, short completions); `seed` varies their data and sampling seeds.
std::vector<pb::JobSpec> BenchJobs(int tenants, int steps, uint64_t seed, int eval_prompts);

// One run of `mode` (one of PipelineModes()) with BenchJobs(tenants, o.steps, seed, ...).
// The run as bench/sim replays it (set-up, wall time, stage costs).
sim::MeasuredRun ToMeasuredRun(const PipelineRun& run);

Result<PipelineRun> RunPipelineMode(const std::string& mode, int tenants, uint64_t seed,
                                    const PipelineBenchOptions& o);

}  // namespace marlaas::bench

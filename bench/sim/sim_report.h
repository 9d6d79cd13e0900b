// `marlaas bench sim`: the simulator checked against measured runs and then used to project.
//  - Validate: every measured run's set-up replayed in the simulator with the profile's engine
//    costs (rollout pass, trainer step: the model under test) and the run's own task costs (its
//    tenants' token counts, tool calls, verifier time and degenerate share, which differ by
//    seed), averaged over replicate simulations (SimulateMean); the prediction error of its wall
//    time, (predicted - measured) / measured. Repeats of a set-up and seed are one row, checked
//    on their mean wall time. The target
//    (issue 7): within 15% at every tenant count measured (1, 8 and 32).
//  - Project: the set-up of the measured runs (steps, group size, prompts per step, staleness,
//    verifier workers, env latency; tasks in turn) scaled to other tenant counts and device
//    counts, in every mode, with the profile in accelerator placement.
// Pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "bench/report.h"
#include "bench/sim/measured_run.h"
#include "bench/sim/simulator.h"

namespace marlaas::sim {

struct ValidationRow {
  // Repeats of one set-up and seed (marlaas bench pipeline --repeats) merged: wall time and
  // utilisations their mean, costs their sums.
  MeasuredRun measured;
  int runs = 1;
  double wall_min_s = 0, wall_max_s = 0;  // over the repeats
  SimResult predicted;
  double error = 0;  // (predicted - measured mean) / measured mean wall time
};

// The set-up a measured run had, as the simulator takes it.
SimSetup SetupOf(const MeasuredRun& run);

Result<std::vector<ValidationRow>> Validate(const std::vector<MeasuredRun>& runs,
                                            const CostProfile& profile);

// Per tenant count: the largest |error| of its runs must be <= max_error.
std::vector<bench::Target> ValidationTargets(const std::vector<ValidationRow>& rows,
                                             double max_error);

struct ProjectionRow {
  std::string mode;
  int tenants = 0, gpus = 0;
  SimResult result;
};

// `base` gives the per-tenant set-up (its tasks are repeated in turn to `tenants`).
Result<std::vector<ProjectionRow>> Project(const SimSetup& base, const CostProfile& profile,
                                           const std::vector<int>& tenants,
                                           const std::vector<int>& gpus,
                                           const std::vector<std::string>& modes);

std::string ValidationTable(const std::vector<ValidationRow>& rows);
std::string ProjectionTable(const std::vector<ProjectionRow>& rows);
// "calibrated_profile" (what the validation replayed with), "profile" (what the projection
// used: the calibrated one or --profile's), "validated_on" (which runs were replayed).
std::string SimJson(const CostProfile& calibrated, const CostProfile& projection_profile,
                    const std::string& validated_on, const std::vector<ValidationRow>& validation,
                    const std::vector<ProjectionRow>& projection,
                    const std::vector<bench::Target>& targets);

}  // namespace marlaas::sim

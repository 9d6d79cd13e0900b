#include "bench/sim/sim_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace marlaas::sim {
namespace {

using nlohmann::json;

std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return buf;
}

}  // namespace

SimSetup SetupOf(const MeasuredRun& run) {
  SimSetup s;
  s.mode = run.mode;
  s.tasks = run.tasks;
  s.steps = run.steps;
  s.group_size = run.group_size;
  s.prompts_per_step = run.prompts_per_step;
  s.max_staleness = run.max_staleness;
  s.checkpoint_every = run.checkpoint_every;
  s.verifier_workers = run.verifier_workers;
  s.env_latency_ms = run.env_latency_ms;
  s.seed = run.seed;
  return s;
}

// Simulated runs averaged per measured row (SimulateMean). Measured on the 2-core machine's
// profile (2026-12-05): single simulated runs of a 1-tenant set-up spread by 12-19% (standard
// deviation over mean; 3-6% at 8 tenants), the mean of 64 by 1-2%.
constexpr int kValidationReplicates = 64;

Result<std::vector<ValidationRow>> Validate(const std::vector<MeasuredRun>& runs,
                                            const CostProfile& profile) {
  // Repeats: runs whose set-up, seed included, the simulator would replay the same.
  auto same_setup = [](const MeasuredRun& a, const MeasuredRun& b) {
    return SetupOf(a) == SetupOf(b);
  };
  std::vector<ValidationRow> rows;
  std::vector<std::vector<const MeasuredRun*>> repeats;
  for (const MeasuredRun& m : runs) {
    size_t i = 0;
    while (i < rows.size() && !same_setup(rows[i].measured, m)) ++i;
    if (i == rows.size()) {
      rows.emplace_back();
      rows.back().measured = m;
      rows.back().measured.costs = RunCosts{};
      repeats.emplace_back();
    }
    repeats[i].push_back(&m);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    ValidationRow& row = rows[i];
    MeasuredRun& merged = row.measured;
    const double n = double(repeats[i].size());
    row.runs = int(repeats[i].size());
    row.wall_min_s = row.wall_max_s = repeats[i].front()->wall_s;
    merged.wall_s = merged.util_rollout = merged.util_trainer = 0;
    for (const MeasuredRun* m : repeats[i]) {
      merged.complete = merged.complete && m->complete;
      merged.wall_s += m->wall_s / n;
      merged.util_rollout += m->util_rollout / n;
      merged.util_trainer += m->util_trainer / n;
      row.wall_min_s = std::min(row.wall_min_s, m->wall_s);
      row.wall_max_s = std::max(row.wall_max_s, m->wall_s);
      MergeRunCosts(m->costs, &merged.costs);
    }
    // The runs' own workload (what their tenants generated, how often their groups were all
    // equal, what verifying took: these differ by seed) and their own file writes (fsync
    // latency: a 1-tenant run's one checkpoint took twice the pooled mean) on the pooled engine
    // costs under test: the passes, steps and the scheduling between them.
    CostProfile own = profile;
    for (auto& [task, t] : TaskCostsOf(merged.costs.tasks)) own.tasks[task] = t;
    ApplyIoCosts(merged.costs, &own);
    MARLAAS_ASSIGN_OR_RETURN(row.predicted,
                             SimulateMean(SetupOf(merged), own, kValidationReplicates));
    row.error = (row.predicted.wall_s - merged.wall_s) / merged.wall_s;
  }
  return rows;
}

std::vector<bench::Target> ValidationTargets(const std::vector<ValidationRow>& rows,
                                             double max_error) {
  std::map<int, double> worst;
  for (const ValidationRow& r : rows)
    worst[r.measured.tenants] = std::max(worst[r.measured.tenants], std::fabs(r.error));
  std::vector<bench::Target> targets;
  for (const auto& [tenants, err] : worst) {
    targets.push_back({Format("simulator: %d tenants, largest |wall time error|", tenants), err,
                       max_error, false});
  }
  return targets;
}

Result<std::vector<ProjectionRow>> Project(const SimSetup& base, const CostProfile& profile,
                                           const std::vector<int>& tenants,
                                           const std::vector<int>& gpus,
                                           const std::vector<std::string>& modes) {
  if (base.tasks.empty())
    return Status(StatusCode::kInvalidArgument, "project: the base set-up has no tasks");
  CostProfile accel = profile;
  accel.placement = "accelerator";
  std::vector<ProjectionRow> rows;
  for (int g : gpus) {
    for (int n : tenants) {
      for (const std::string& mode : modes) {
        SimSetup s = base;
        s.mode = mode;
        s.gpus = g;
        s.tasks.clear();
        for (int k = 0; k < n; ++k) s.tasks.push_back(base.tasks[size_t(k) % base.tasks.size()]);
        MARLAAS_ASSIGN_OR_RETURN(SimResult r, Simulate(s, accel));
        rows.push_back({mode, n, g, r});
      }
    }
  }
  return rows;
}

std::string ValidationTable(const std::vector<ValidationRow>& rows) {
  // Passes (rollout forwards) and training steps, measured / simulated: where a wall time is
  // off, they tell a schedule that batches differently from a cost that is off.
  // Several runs of a row: their mean, and the range of their wall times.
  std::string out = Format("%-18s %7s %4s %4s %10s %15s %10s %7s %14s %14s %13s %11s\n", "mode",
                           "tenants", "seed", "runs", "measured s", "range", "simulated", "error",
                           "util r/t meas", "util r/t sim", "passes m/s", "steps m/s");
  for (const ValidationRow& r : rows) {
    const double n = std::max(1, r.runs);
    out += Format(
        "%-18s %7d %4llu %4d %10.2f %6.2f - %6.2f %10.2f %+6.1f%% %6.2f / %5.2f %6.2f / %5.2f "
        "%6llu/%-6llu %5llu/%-5llu\n",
        r.measured.mode.c_str(), r.measured.tenants, (unsigned long long)r.measured.seed, r.runs,
        r.measured.wall_s, r.wall_min_s, r.wall_max_s, r.predicted.wall_s, 100 * r.error,
        r.measured.util_rollout, r.measured.util_trainer, r.predicted.util_rollout,
        r.predicted.util_trainer, (unsigned long long)std::llround(r.measured.costs.rollout.n / n),
        (unsigned long long)r.predicted.forward_passes,
        (unsigned long long)std::llround(r.measured.costs.trainer.n / n),
        (unsigned long long)r.predicted.train_steps);
  }
  return out;
}

std::string ProjectionTable(const std::vector<ProjectionRow>& rows) {
  std::string out = Format("%-18s %7s %5s %9s %8s %10s %10s %12s\n", "mode", "tenants", "gpus",
                           "replicas", "trainers", "wall s", "util roll", "vs seq_sync");
  std::map<std::pair<int, int>, double> seq;
  for (const ProjectionRow& r : rows)
    if (r.mode == "sequential_sync") seq[{r.tenants, r.gpus}] = r.result.wall_s;
  for (const ProjectionRow& r : rows) {
    const auto it = seq.find({r.tenants, r.gpus});
    // Without a sequential_sync row to compare with, the column says so rather than "0.00x".
    const std::string speedup = it != seq.end() && r.result.wall_s > 0
                                    ? Format("%.2fx", it->second / r.result.wall_s)
                                    : std::string("-");
    out += Format("%-18s %7d %5d %9d %8d %10.1f %10.2f %12s%s\n", r.mode.c_str(), r.tenants, r.gpus,
                  r.result.rollout_replicas, r.result.trainers, r.result.wall_s,
                  r.result.util_rollout, speedup.c_str(), r.result.complete ? "" : "  INCOMPLETE");
  }
  return out;
}

std::string SimJson(const CostProfile& calibrated, const CostProfile& projection_profile,
                    const std::string& validated_on, const std::vector<ValidationRow>& validation,
                    const std::vector<ProjectionRow>& projection,
                    const std::vector<bench::Target>& targets) {
  json doc = {{"calibrated_profile", json::parse(CostProfileToJson(calibrated))},
              {"profile", json::parse(CostProfileToJson(projection_profile))},
              {"validated_on", validated_on},
              {"validation", json::array()},
              {"projection", json::array()},
              {"targets", json::array()}};
  for (const ValidationRow& r : validation) {
    const double n = std::max(1, r.runs);  // passes and steps: per run
    doc["validation"].push_back({{"mode", r.measured.mode},
                                 {"tenants", r.measured.tenants},
                                 {"seed", r.measured.seed},
                                 {"runs", r.runs},
                                 {"measured_wall_s", r.measured.wall_s},
                                 {"measured_wall_min_s", r.wall_min_s},
                                 {"measured_wall_max_s", r.wall_max_s},
                                 {"simulated_wall_s", r.predicted.wall_s},
                                 {"error", r.error},
                                 {"measured_util_rollout", r.measured.util_rollout},
                                 {"simulated_util_rollout", r.predicted.util_rollout},
                                 {"measured_util_trainer", r.measured.util_trainer},
                                 {"simulated_util_trainer", r.predicted.util_trainer},
                                 {"measured_passes", double(r.measured.costs.rollout.n) / n},
                                 {"simulated_passes", r.predicted.forward_passes},
                                 {"measured_train_steps", double(r.measured.costs.trainer.n) / n},
                                 {"simulated_train_steps", r.predicted.train_steps}});
  }
  for (const ProjectionRow& r : projection) {
    doc["projection"].push_back({{"mode", r.mode},
                                 {"tenants", r.tenants},
                                 {"gpus", r.gpus},
                                 {"rollout_replicas", r.result.rollout_replicas},
                                 {"trainers", r.result.trainers},
                                 {"complete", r.result.complete},
                                 {"wall_s", r.result.wall_s},
                                 {"util_rollout", r.result.util_rollout},
                                 {"util_trainer", r.result.util_trainer},
                                 {"samples", r.result.samples}});
  }
  for (const bench::Target& t : targets) {
    doc["targets"].push_back(
        {{"name", t.name}, {"value", t.value}, {"threshold", t.threshold}, {"met", t.met()}});
  }
  return doc.dump(2) + "\n";
}

}  // namespace marlaas::sim

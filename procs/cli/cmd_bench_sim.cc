// `marlaas bench sim --calibrate FILE[,FILE...] [--validate FILE[,FILE...]] [--profile FILE]
// [--tenants 32,128,256,1024] [--gpus 1,8,64] [--modes sequential_sync,async] [--max-error 0.15]
// [--json OUT]`:
// fits the simulator's cost profile from the stage costs a `marlaas bench pipeline` run measured
// (FILE, its "measured" runs; several files are pooled), replays every measured run of the
// --validate files (out of sample; without it, the calibration runs themselves) in the
// simulator and prints predicted against measured wall time (the target: within --max-error at
// every tenant count), then projects the same tenant set-up to more tenants and devices with the
// calibrated profile, or with --profile (a cost profile JSON, e.g. measured on a GPU;
// bench/sim/cost_model.h). Writes the JSON of bench/sim/sim_report.h and a plot (OUT.svg). Exit
// status 1 when a validation target is missed, 2 on bad usage.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/file_util.h"
#include "bench/sim/sim_report.h"
#include "procs/cli/cli.h"
#include "procs/cli/svg_chart.h"

namespace marlaas::cli {
namespace {

constexpr const char kCommand[] = "bench sim";
constexpr int kMaxTenants = sim::kMaxSimTenants, kMaxGpus = 1024;

// Distinct whole numbers in [lo, hi] (a repeated one would repeat its rows).
bool ParseInts(const std::string& text, int lo, int hi, std::vector<int>* out) {
  std::vector<std::string> items;
  if (!SplitList(text, &items)) return false;
  for (const std::string& item : items) {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (!std::isdigit(static_cast<unsigned char>(item[0])) || errno != 0 || *end != '\0' ||
        v < lo || v > hi || std::find(out->begin(), out->end(), int(v)) != out->end())
      return false;
    out->push_back(int(v));
  }
  return true;
}

// The measured runs of `marlaas bench pipeline --json` files, pooled; *cores is what they were
// measured on (every file alike; 0 on entry: any), *cores_from the file that set it.
Result<std::vector<sim::MeasuredRun>> ReadMeasuredRuns(const std::vector<std::string>& files,
                                                       int* cores, std::string* cores_from) {
  std::vector<sim::MeasuredRun> runs;
  for (const std::string& file : files) {
    MARLAAS_ASSIGN_OR_RETURN(const std::string text, ReadFile(file));
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("measured") ||
        !doc["measured"].is_array() || doc["measured"].empty())
      return Status(StatusCode::kInvalidArgument,
                    file +
                        ": not a `marlaas bench pipeline --json` file with measured runs "
                        "(\"measured\": [...])");
    int file_cores = 2;  // files from before the field: measured here, on 2 cores
    if (doc.contains("cores")) {
      const nlohmann::json& c = doc["cores"];
      if (!c.is_number_unsigned() || c.get<uint64_t>() < 1 || c.get<uint64_t>() > 4096)
        return Status(StatusCode::kInvalidArgument,
                      file + ": cores must be a whole number in [1, 4096], not " + c.dump());
      file_cores = int(c.get<uint64_t>());
    }
    if (*cores != 0 && file_cores != *cores)
      return Status(StatusCode::kInvalidArgument,
                    file + " was measured on " + std::to_string(file_cores) + " cores, " +
                        *cores_from + " on " + std::to_string(*cores));
    if (*cores == 0) *cores_from = file;
    *cores = file_cores;
    for (size_t i = 0; i < doc["measured"].size(); ++i) {
      MARLAAS_ASSIGN_OR_RETURN(
          sim::MeasuredRun run,
          sim::MeasuredRunFromJson(doc["measured"][i],
                                   file + ": measured[" + std::to_string(i) + "]"));
      runs.push_back(std::move(run));
    }
  }
  return runs;
}

}  // namespace

int RunBenchSim(std::vector<std::string> args) {
  std::string calibrate, validate_s, profile_path, json_path,
      tenants_s = "32,128,256,1024", gpus_s = "1,8,64", modes_s = "sequential_sync,async";
  TakeFlag(&args, "--calibrate", &calibrate);
  TakeFlag(&args, "--validate", &validate_s);
  TakeFlag(&args, "--profile", &profile_path);
  TakeFlag(&args, "--json", &json_path);
  TakeFlag(&args, "--tenants", &tenants_s);
  TakeFlag(&args, "--gpus", &gpus_s);
  TakeFlag(&args, "--modes", &modes_s);
  double max_error = 0.15;
  if (!TakeNumber(&args, kCommand, "--max-error", 0, 10, &max_error)) return 2;
  if (int rc = RejectRest(kCommand, args)) return rc;
  std::vector<int> tenants, gpus;
  std::vector<std::string> modes, files, validate_files;
  if (calibrate.empty()) {
    std::fprintf(stderr,
                 "marlaas bench sim: --calibrate FILE (a `marlaas bench pipeline --json` "
                 "file) is required\n");
    return 2;
  }
  if (!ParseInts(tenants_s, 1, kMaxTenants, &tenants) || !ParseInts(gpus_s, 1, kMaxGpus, &gpus)) {
    std::fprintf(stderr,
                 "marlaas bench sim: --tenants and --gpus take lists of distinct whole numbers "
                 "like 32,128 (tenants in [1, %d], gpus in [1, %d])\n",
                 kMaxTenants, kMaxGpus);
    return 2;
  }
  // Checked before the work whose results it is to hold.
  for (const std::string& path : {json_path, json_path + ".svg"}) {
    if (json_path.empty()) break;
    if (Status st = CheckOutputFile("--json", path); !st.ok()) {
      std::fprintf(stderr, "marlaas bench sim: %s\n", st.message().c_str());
      return 2;
    }
  }
  if (!SplitList(modes_s, &modes)) {
    std::fprintf(stderr, "marlaas bench sim: --modes takes a list like sequential_sync,async\n");
    return 2;
  }
  for (size_t i = 0; i < modes.size(); ++i) {
    const std::string& m = modes[i];
    if (m != "sequential_sync" && m != "multi_tenant_sync" && m != "async") {
      std::fprintf(stderr, "marlaas bench sim: --modes: unknown mode '%s'\n", m.c_str());
      return 2;
    }
    if (std::find(modes.begin(), modes.begin() + long(i), m) != modes.begin() + long(i)) {
      std::fprintf(stderr, "marlaas bench sim: --modes: '%s' is given twice\n", m.c_str());
      return 2;
    }
  }
  // Several files (comma-separated) are pooled: e.g. a run at 1, 8 and 32 tenants and repeats of
  // its short 1-tenant runs. They must come from machines with the same number of cores.
  if (!SplitList(calibrate, &files) ||
      (!validate_s.empty() && !SplitList(validate_s, &validate_files))) {
    std::fprintf(stderr, "marlaas bench sim: --calibrate and --validate take FILE[,FILE...]\n");
    return 2;
  }
  int cores = 0;
  std::string cores_from;
  auto calibration_runs = ReadMeasuredRuns(files, &cores, &cores_from);
  if (!calibration_runs.ok()) {
    std::fprintf(stderr, "marlaas bench sim: %s\n", calibration_runs.status().message().c_str());
    return 1;
  }
  std::vector<sim::MeasuredRun>& runs = *calibration_runs;
  // Out of sample with --validate: the profile fitted on --calibrate's runs predicts others'
  // (each replayed with its own workload: tokens, tool calls, verifier time). Without it, the
  // calibration runs are replayed: how well the fit matches what it was fitted on.
  std::vector<sim::MeasuredRun> validate_runs = runs;
  if (!validate_files.empty()) {
    int validate_cores = cores;
    auto v = ReadMeasuredRuns(validate_files, &validate_cores, &cores_from);
    if (!v.ok()) {
      std::fprintf(stderr, "marlaas bench sim: %s\n", v.status().message().c_str());
      return 1;
    }
    validate_runs = std::move(*v);
  }
  auto calibrated = sim::CalibrateProfile(runs, cores, "calibrated from " + calibrate);
  if (!calibrated.ok()) {
    std::fprintf(stderr, "marlaas bench sim: %s\n", calibrated.status().message().c_str());
    return 1;
  }
  auto validation = sim::Validate(validate_runs, *calibrated);
  if (!validation.ok()) {
    std::fprintf(stderr, "marlaas bench sim: %s\n", validation.status().message().c_str());
    return 1;
  }
  sim::CostProfile projection_profile = *calibrated;
  if (!profile_path.empty()) {
    auto ptext = ReadFile(profile_path);
    auto p =
        ptext.ok() ? sim::CostProfileFromJson(*ptext) : Result<sim::CostProfile>(ptext.status());
    if (!p.ok()) {
      std::fprintf(stderr, "marlaas bench sim: %s: %s\n", profile_path.c_str(),
                   p.status().message().c_str());
      return 1;
    }
    projection_profile = *p;
    // A device profile (bench_model_profile) measures the engines; what a task's groups look
    // like (tokens, tool calls, verifier time) comes from the measured runs.
    if (projection_profile.tasks.empty()) projection_profile.tasks = calibrated->tasks;
    for (const std::string& task : runs.front().tasks) {
      if (projection_profile.tasks.count(task) == 0) {
        std::fprintf(stderr,
                     "marlaas bench sim: --profile %s has costs for tasks but none for '%s', a "
                     "task of the measured runs (give every task, or none to take them from the "
                     "runs)\n",
                     profile_path.c_str(), task.c_str());
        return 1;
      }
    }
    if (projection_profile.checkpoint_s == 0)  // host file writes, as measured here
      projection_profile.checkpoint_s = calibrated->checkpoint_s;
    if (projection_profile.admit_s == 0) projection_profile.admit_s = calibrated->admit_s;
    if (projection_profile.settle_s == 0) projection_profile.settle_s = calibrated->settle_s;
  }
  const sim::CostProfile& c = *calibrated;
  std::printf("cost profile (%s, %d cores):\n", c.name.c_str(), c.cores);
  std::printf(
      "  rollout pass  = %.3g s + %.3g s/row + %.3g s/token + %.3g s/adapter (+ %.3g s cold)\n",
      c.rollout.c[0], c.rollout.c[1], c.rollout.c[2], c.rollout.c[3], c.rollout.c[4]);
  std::printf(
      "  trainer step  = %.3g s + %.3g s/row + %.3g s/padded token + %.3g s/training tenant "
      "(+ %.3g s cold); %.3g s per tenant checkpoint; %.3g s per admission, %.3g s per "
      "settle\n",
      c.trainer.c[0], c.trainer.c[1], c.trainer.c[2], c.trainer.c[3], c.trainer.c[4],
      c.checkpoint_s, c.admit_s, c.settle_s);
  for (const auto& [name, t] : c.tasks) {
    std::printf(
        "  %-17s prompt %.1f tok, completion %.1f tok, %.2f tool calls (%.0f%% shared), verify "
        "%.2f ms/group, tool %.2f ms, %.0f%% degenerate\n",
        name.c_str(), t.prompt_tokens, t.completion_tokens, t.tool_calls, 100 * t.shared_tool_calls,
        1e3 * t.verify_s, 1e3 * t.tool_s, 100 * t.degenerate);
    const double reproducible = sim::ReproducibleShare(t, runs.front().group_size);
    if (t.shared_tool_calls > reproducible + 0.005)
      std::printf(
          "  %-17s (replayed with %.0f%% shared: drawing each completion's call on its own, the "
          "simulator shares at most that)\n",
          "", 100 * reproducible);
  }
  const std::string validated_on = validate_files.empty()
                                       ? "the calibration runs (in sample)"
                                       : "runs not used in the calibration: " + validate_s;
  std::printf("\nvalidation: %s, replayed in the simulator\n%s", validated_on.c_str(),
              sim::ValidationTable(*validation).c_str());
  sim::SimSetup base = sim::SetupOf(runs.front());
  auto projection = sim::Project(base, projection_profile, tenants, gpus, modes);
  if (!projection.ok()) {
    std::fprintf(stderr, "marlaas bench sim: %s\n", projection.status().message().c_str());
    return 1;
  }
  std::printf("\nprojection (%s; a device runs a pass at the profile's cost)\n%s",
              projection_profile.name.c_str(), sim::ProjectionTable(*projection).c_str());
  const std::vector<bench::Target> targets = sim::ValidationTargets(*validation, max_error);
  std::printf("\n");
  const int missed = bench::PrintTargets(targets, stdout);
  if (!json_path.empty()) {
    Status st =
        WriteFileAtomically(json_path, sim::SimJson(*calibrated, projection_profile, validated_on,
                                                    *validation, *projection, targets));
    std::vector<ChartSeries> series;
    for (int g : gpus) {
      for (const std::string& m : modes) {
        ChartSeries s{m + ", " + std::to_string(g) + " gpus", {}};
        for (const sim::ProjectionRow& r : *projection)
          if (r.gpus == g && r.mode == m) s.points.emplace_back(r.tenants, r.result.wall_s);
        series.push_back(std::move(s));
      }
    }
    if (st.ok())
      st = WriteFileAtomically(json_path + ".svg",
                               LineChartSvg("simulated time for every tenant to finish", "tenants",
                                            "wall seconds", series));
    if (!st.ok()) {
      std::fprintf(stderr, "marlaas bench sim: --json %s: %s\n", json_path.c_str(),
                   st.message().c_str());
      return 1;
    }
    std::printf("wrote %s (+ .svg)\n", json_path.c_str());
  }
  return missed == 0 ? 0 : 1;
}

}  // namespace marlaas::cli

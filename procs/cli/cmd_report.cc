// `marlaas report [--state-dir DIR] [--out DIR]`: the plots of a service's state dir, from what
// serve and the trainer keep there — per-tenant reward curves from tenants/<id>/steps.jsonl and
// the engine utilisation timeline from metrics.jsonl — written as rewards.svg, utilization.svg
// and table.txt (tenant, task, state, steps, reward at the first and last step) into --out
// (default <state-dir>/reports/report-<unix seconds>). Works on a running or a stopped service.
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "procs/cli/base_model.h"
#include "procs/cli/cli.h"
#include "procs/cli/svg_chart.h"

namespace marlaas::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The JSON objects of a JSONL file; lines that do not parse (a torn last line) are skipped.
std::vector<json> ReadJsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    json j = json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

// The file's text without trailing newlines and spaces, or `fallback` when it cannot be read.
std::string ReadOr(const std::string& path, const std::string& fallback) {
  auto text = ReadFile(path);
  if (!text.ok()) return fallback;
  std::string s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

int RunReport(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string state_dir = DefaultStateDir(), out;
  TakeFlag(&args, "--state-dir", &state_dir);
  TakeFlag(&args, "--out", &out);
  if (int rc = RejectRest("report", args)) return rc;
  if (!fs::is_directory(state_dir + "/tenants")) {
    std::fprintf(stderr, "marlaas report: %s has no tenants/ (not a service state dir)\n",
                 state_dir.c_str());
    return 1;
  }
  if (out.empty()) out = state_dir + "/reports/report-" + std::to_string(std::time(nullptr));
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    std::fprintf(stderr, "marlaas report: creating %s: %s\n", out.c_str(), ec.message().c_str());
    return 1;
  }
  std::vector<std::string> ids;
  for (const auto& e : fs::directory_iterator(state_dir + "/tenants", ec))
    if (fs::exists(e.path() / "job.json")) ids.push_back(e.path().filename().string());
  std::sort(ids.begin(), ids.end());
  std::vector<ChartSeries> curves;
  char row[256];
  std::string table;
  std::snprintf(row, sizeof(row), "%-24s %-17s %-10s %6s %8s %8s\n", "tenant", "task", "state",
                "steps", "first", "last");
  table += row;
  for (const std::string& id : ids) {
    const std::string dir = state_dir + "/tenants/" + id;
    const json job = json::parse(ReadOr(dir + "/job.json", "{}"), nullptr, false);
    std::string state = ReadOr(dir + "/state", "unfinished");
    state = state.substr(0, state.find(':'));
    ChartSeries s{id, {}};
    for (const json& step : ReadJsonl(dir + "/steps.jsonl")) {
      if (step.contains("step") && step.contains("reward_mean"))
        s.points.push_back({step["step"].get<double>(), step["reward_mean"].get<double>()});
    }
    const double first = s.points.empty() ? 0 : s.points.front().second;
    const double last = s.points.empty() ? 0 : s.points.back().second;
    std::snprintf(row, sizeof(row), "%-24s %-17s %-10s %6zu %8.3f %8.3f\n", id.c_str(),
                  job.is_object() ? job.value("task", "?").c_str() : "?", state.c_str(),
                  s.points.size(), first, last);
    table += row;
    curves.push_back(std::move(s));
  }
  std::vector<ChartSeries> util = {{"rollout", {}}, {"trainer", {}}, {"verifier", {}}};
  const std::vector<json> metrics = ReadJsonl(state_dir + "/metrics.jsonl");
  const double t0 = metrics.empty() ? 0 : metrics.front().value("unix_ms", 0.0);
  for (const json& m : metrics) {
    if (!m.contains("utilization_now")) continue;
    const double t = (m.value("unix_ms", 0.0) - t0) / 1000.0;
    for (ChartSeries& s : util) s.points.push_back({t, m["utilization_now"].value(s.name, 0.0)});
  }
  Status st = WriteFileAtomically(out + "/table.txt", table);
  if (st.ok()) {
    st = WriteFileAtomically(
        out + "/rewards.svg",
        LineChartSvg("mean training reward per step", "step", "reward (sampled)", curves));
  }
  if (st.ok()) {
    st = WriteFileAtomically(out + "/utilization.svg",
                             LineChartSvg("engine utilisation", "seconds", "busy fraction", util));
  }
  if (!st.ok()) {
    std::fprintf(stderr, "marlaas report: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("%s\n%zu tenants, %zu metrics samples; report: %s\n", table.c_str(), ids.size(),
              metrics.size(), out.c_str());
  return 0;
}

}  // namespace marlaas::cli

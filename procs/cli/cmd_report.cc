// `marlaas report [--state-dir DIR] [--out DIR]`: the plots of a service's state dir, from what
// serve and the trainer keep there — per-tenant reward curves from tenants/<id>/steps.jsonl and
// the engine utilisation timeline from metrics.jsonl — written as rewards.svg, utilization.svg
// and table.txt (tenant, task, state, steps, reward at the first and last step) into --out
// (default <state-dir>/reports/report-<unix seconds>). Works on a running or a stopped service.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/file_util.h"
#include "procs/cli/base_model.h"
#include "procs/cli/cli.h"
#include "procs/cli/run_jobs.h"
#include "procs/cli/svg_chart.h"

namespace marlaas::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Lines left out of the plots because they are damaged (not a JSON object, a field missing,
// mistyped or out of range): counted, and the first named, so that a damaged file is reported
// rather than plotted wrong or fatal.
struct Skipped {
  size_t lines = 0;
  std::string first;
  void Add(const std::string& path, size_t line, const std::string& why) {
    const std::string where = line > 0 ? path + ":" + std::to_string(line) : path;
    if (lines++ == 0) first = where + " (" + why + ")";
  }
};

// A JSONL file's lines that parse as objects, with their line numbers. It is read as ReadFile
// reads (a pipe or a device is refused, never waited on: a FIFO in the state dir hung the
// report); a last line without its newline is one being written and is left out quietly, any
// other line that is not an object is counted in *skipped. A missing file has no lines.
std::vector<std::pair<size_t, json>> ReadJsonl(const std::string& path, Skipped* skipped) {
  std::vector<std::pair<size_t, json>> out;
  auto text = ReadFile(path);
  if (!text.ok()) {
    if (text.status().code() != StatusCode::kNotFound)
      skipped->Add(path, 0, text.status().message());
    return out;
  }
  size_t n = 0, pos = 0;
  while (pos < text->size()) {
    const size_t eol = text->find('\n', pos);
    ++n;
    if (eol == std::string::npos) break;  // torn: still being written
    json j = json::parse(text->begin() + long(pos), text->begin() + long(eol), nullptr, false);
    if (!j.is_discarded() && j.is_object()) {
      out.emplace_back(n, std::move(j));
    } else {
      skipped->Add(path, n, "not a JSON object");
    }
    pos = eol + 1;
  }
  return out;
}

// j[key] when it is a finite number within +-`limit` (by default what a chart can draw,
// svg_chart.h); nullopt when it is missing, of another type or out of range.
std::optional<double> NumberAt(const json& j, const char* key, double limit = kMaxChartValue) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v) || std::fabs(v) > limit) return std::nullopt;
  return v;
}

// A sample's time (ms since 1970: 1.8e12 now, past a chart's range; only its distance from the
// first sample is drawn): up to the year 2286.
constexpr double kMaxUnixMs = 1e13;

// printf into a string of whatever length it needs (a row's task comes from a file).
template <typename... Args>
std::string Format(const char* fmt, Args... args) {
  const int n = std::snprintf(nullptr, 0, fmt, args...);
  std::string s(size_t(std::max(n, 0)) + 1, '\0');
  std::snprintf(s.data(), s.size(), fmt, args...);
  s.pop_back();
  return s;
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
  // Among the tenants' folders a report would be taken for one (with a job.json beside it).
  const fs::path tenants = fs::weakly_canonical(state_dir + "/tenants", ec);
  const fs::path out_at = fs::weakly_canonical(out, ec);
  if (!ec && std::mismatch(tenants.begin(), tenants.end(), out_at.begin(), out_at.end()).first ==
                 tenants.end()) {
    std::fprintf(stderr, "marlaas report: --out %s is inside %s: give a folder outside it\n",
                 out.c_str(), tenants.c_str());
    return 2;
  }
  ec.clear();
  // A report replaces an earlier report (marked by a file of its own), never someone else's
  // files: `--out .` in a project folder once overwrote its table.txt.
  const std::string marker = out + "/.marlaas-report";
  if (fs::exists(out, ec)) {
    const bool empty = fs::is_empty(out, ec);
    if (ec) {
      std::fprintf(stderr, "marlaas report: --out %s: %s\n", out.c_str(), ec.message().c_str());
      return 1;
    }
    if (!empty && !fs::exists(marker, ec)) {
      std::fprintf(stderr,
                   "marlaas report: --out %s holds files that are not an earlier report's: give a "
                   "new or empty folder\n",
                   out.c_str());
      return 1;
    }
  }
  ec.clear();
  fs::create_directories(out, ec);
  if (ec) {
    std::fprintf(stderr, "marlaas report: --out %s cannot be made: %s\n", out.c_str(),
                 ec.message().c_str());
    return 1;
  }
  if (Status st = WriteFileAtomically(marker, "written by marlaas report\n"); !st.ok()) {
    std::fprintf(stderr, "marlaas report: %s\n", st.message().c_str());
    return 1;
  }
  std::vector<std::string> ids;
  for (const auto& e : fs::directory_iterator(state_dir + "/tenants", ec))
    if (fs::exists(e.path() / "job.json")) ids.push_back(e.path().filename().string());
  std::sort(ids.begin(), ids.end());
  std::vector<ChartSeries> curves;
  Skipped skipped;
  std::string table = Format("%-24s %-17s %-10s %6s %8s %8s\n", "tenant", "task", "state", "steps",
                             "first", "last");
  for (const std::string& id : ids) {
    const std::string dir = state_dir + "/tenants/" + id;
    const json job = json::parse(ReadOr(dir + "/job.json", "{}"), nullptr, false);
    const std::string task = job.is_object() && job.contains("task") && job["task"].is_string()
                                 ? job["task"].get<std::string>()
                                 : "?";
    std::string state = ReadOr(dir + "/state", "unfinished");
    state = state.substr(0, state.find(':'));
    ChartSeries s{id, {}};
    for (const auto& [line, step] : ReadJsonl(dir + "/steps.jsonl", &skipped)) {
      const std::optional<double> x = NumberAt(step, "step"), y = NumberAt(step, "reward_mean");
      if (x && y) {
        s.points.push_back({*x, *y});
      } else {
        skipped.Add(dir + "/steps.jsonl", line, x ? "reward_mean" : "step");
      }
    }
    const double first = s.points.empty() ? 0 : s.points.front().second;
    const double last = s.points.empty() ? 0 : s.points.back().second;
    table += Format("%-24s %-17s %-10s %6zu %8.3f %8.3f\n", id.c_str(), task.c_str(), state.c_str(),
                    s.points.size(), first, last);
    curves.push_back(std::move(s));
  }
  std::vector<ChartSeries> util = {{"rollout", {}}, {"trainer", {}}, {"verifier", {}}};
  // The log's older part first (serve rotates it past kMetricsLogBytes), then the current one.
  std::vector<std::pair<std::string, std::pair<size_t, json>>> metrics;
  for (const char* name : {kOlderMetricsLog, kMetricsLog}) {
    const std::string path = state_dir + "/" + name;
    for (auto& l : ReadJsonl(path, &skipped)) metrics.emplace_back(path, std::move(l));
  }
  std::optional<double> t0;
  for (const auto& [metrics_path, numbered] : metrics) {
    const auto& [line, m] = numbered;
    const std::optional<double> ms = NumberAt(m, "unix_ms", kMaxUnixMs);
    if (!ms) {
      skipped.Add(metrics_path, line, "unix_ms");
      continue;
    }
    if (!t0) t0 = *ms;
    if (!m.contains("utilization_now")) continue;  // a sample before the first interval
    const json& now = m["utilization_now"];
    bool complete = now.is_object();
    std::vector<double> busy;
    for (const ChartSeries& s : util) {
      const std::optional<double> b = complete ? NumberAt(now, s.name.c_str()) : std::nullopt;
      complete = complete && b.has_value();
      busy.push_back(b.value_or(0));
    }
    if (!complete) {
      skipped.Add(metrics_path, line, "utilization_now");
      continue;
    }
    for (size_t i = 0; i < util.size(); ++i)
      util[i].points.push_back({(*ms - *t0) / 1000.0, busy[i]});
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
    std::fprintf(stderr, "marlaas report: %s\n", st.message().c_str());
    return 1;
  }
  std::printf("%s\n%zu tenants, %zu metrics samples; report: %s\n", table.c_str(), ids.size(),
              metrics.size(), out.c_str());
  if (skipped.lines > 0) {
    std::fprintf(stderr,
                 "marlaas report: left out %zu damaged line(s) (not JSON, or a field missing, "
                 "mistyped or out of range), the first at %s\n",
                 skipped.lines, skipped.first.c_str());
  }
  return 0;
}

}  // namespace marlaas::cli

#include "bench/pipeline_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

namespace marlaas::bench {
namespace {

using json = nlohmann::json;

const PipelineRow* Find(const PipelineSummary& s, const std::string& mode, int tenants) {
  for (const PipelineRow& r : s.rows)
    if (r.mode == mode && r.tenants == tenants) return &r;
  return nullptr;
}

double EngineUtil(const PipelineRow& r) { return (r.util_rollout + r.util_trainer) / 2; }

}  // namespace

PipelineSummary SummarisePipelineRuns(const std::vector<PipelineRun>& runs) {
  PipelineSummary s;
  std::map<std::pair<int, int>, std::vector<const PipelineRun*>> groups;  // (tenants, mode)
  for (const PipelineRun& r : runs) {
    const int mode_index = int(std::find(PipelineModes().begin(), PipelineModes().end(), r.mode) -
                               PipelineModes().begin());
    groups[{r.tenants, mode_index}].push_back(&r);
  }
  for (auto& [key, rs] : groups) {
    PipelineRow row;
    row.mode = rs.front()->mode;
    row.tenants = key.first;
    row.runs = int(rs.size());
    std::set<uint64_t> seeds;
    for (const PipelineRun* r : rs) seeds.insert(r->seed);
    row.seeds = int(seeds.size());
    const double n = double(rs.size());
    row.tenant_reward_mean.assign(size_t(row.tenants), 0.0);
    // The spread is over seeds: each seed's repeats are averaged first (more repeats of a seed
    // make its mean steadier, not the spread wider).
    std::map<uint64_t, std::vector<const PipelineRun*>> by_seed;
    for (const PipelineRun* r : rs) by_seed[r->seed].push_back(r);
    double lo = 1e9, hi = -1e9;
    std::vector<double> t_lo(size_t(row.tenants), 1e9), t_hi(size_t(row.tenants), -1e9);
    for (const auto& [seed, reps] : by_seed) {
      double mean = 0;
      std::vector<double> tenant(size_t(row.tenants), 0.0);
      std::vector<int> tenant_runs(size_t(row.tenants), 0);
      for (const PipelineRun* r : reps) {
        mean += r->final_reward_mean / double(reps.size());
        for (size_t t = 0; t < r->final_rewards.size() && t < size_t(row.tenants); ++t) {
          tenant[t] += r->final_rewards[t];
          ++tenant_runs[t];
        }
      }
      lo = std::min(lo, mean);
      hi = std::max(hi, mean);
      for (size_t t = 0; t < size_t(row.tenants); ++t) {
        if (tenant_runs[t] == 0) continue;
        t_lo[t] = std::min(t_lo[t], tenant[t] / tenant_runs[t]);
        t_hi[t] = std::max(t_hi[t], tenant[t] / tenant_runs[t]);
      }
    }
    for (const PipelineRun* r : rs) {
      row.complete = row.complete && r->complete;
      row.wall_s += r->wall_s / n;
      row.util_rollout += r->util_rollout / n;
      row.util_verifier += r->util_verifier / n;
      row.util_trainer += r->util_trainer / n;
      row.samples_per_s += r->samples_per_s / n;
      row.final_reward_mean += r->final_reward_mean / n;
      for (size_t t = 0; t < r->final_rewards.size() && t < size_t(row.tenants); ++t)
        row.tenant_reward_mean[t] += r->final_rewards[t] / n;
      for (int b = 0; b < kStalenessBuckets; ++b)
        row.staleness[size_t(b)] += r->staleness[size_t(b)];
      row.groups_dropped += r->groups_dropped;
    }
    row.final_reward_spread = hi - lo;
    for (size_t t = 0; t < size_t(row.tenants); ++t)
      row.tenant_reward_spread.push_back(t_hi[t] >= t_lo[t] ? t_hi[t] - t_lo[t] : 0.0);
    row.idle_fraction = 1 - EngineUtil(row);
    s.rows.push_back(std::move(row));
  }
  for (const PipelineRow& r : s.rows) {
    if (r.mode != "async") continue;
    const PipelineRow* seq = Find(s, "sequential_sync", r.tenants);
    if (seq == nullptr) continue;
    PipelineRatio q;
    q.tenants = r.tenants;
    // A run's wall time is positive (measured_run.h refuses others); an engine never seen busy
    // gives no ratio, and its targets are missed rather than left out.
    q.speedup = r.wall_s > 0 ? seq->wall_s / r.wall_s : 0;
    q.util_ratio = EngineUtil(*seq) > 0 ? EngineUtil(r) / EngineUtil(*seq) : 0;
    if (const PipelineRow* multi = Find(s, "multi_tenant_sync", r.tenants);
        multi != nullptr && multi->wall_s > 0)
      q.multi_speedup = seq->wall_s / multi->wall_s;
    q.quality_within_spread = std::fabs(r.final_reward_mean - seq->final_reward_mean) <=
                              std::max({r.final_reward_spread, seq->final_reward_spread, 0.05});
    s.ratios.push_back(q);
    if (r.tenants == 32) {
      s.targets.push_back(
          {"32 tenants: end-to-end time sequential_sync / async", q.speedup, 7.0, true});
      s.targets.push_back(
          {"32 tenants: engine utilisation async / sequential_sync", q.util_ratio, 4.5, true});
      s.targets.push_back({"32 tenants: |final reward async - sequential| within the spread",
                           q.quality_within_spread ? 1.0 : 0.0, 1.0, true});
    }
  }
  return s;
}

std::string PipelineTable(const PipelineSummary& s) {
  std::string out =
      "mode               tenants  runs   wall_s  util_roll  util_train  util_verif  idle  "
      "samples/s  reward (spread)  stale>0  dropped\n";
  char line[256];
  for (const PipelineRow& r : s.rows) {
    uint64_t stale = 0;
    for (int b = 1; b < kStalenessBuckets; ++b) stale += r.staleness[size_t(b)];
    std::snprintf(
        line, sizeof(line),
        "%-18s %7d %5d %8.3f %10.2f %11.2f %11.2f %5.2f %10.1f  %.3f (%.3f)  %7llu %8llu%s\n",
        r.mode.c_str(), r.tenants, r.runs, r.wall_s, r.util_rollout, r.util_trainer,
        r.util_verifier, r.idle_fraction, r.samples_per_s, r.final_reward_mean,
        r.final_reward_spread, (unsigned long long)stale, (unsigned long long)r.groups_dropped,
        r.complete ? "" : "  INCOMPLETE");
    out += line;
  }
  for (const PipelineRatio& q : s.ratios) {
    std::snprintf(line, sizeof(line),
                  "%d tenants: async is %.2fx faster end to end than sequential_sync "
                  "(multi_tenant_sync %.2fx), engine utilisation %.2fx; final reward %s\n",
                  q.tenants, q.speedup, q.multi_speedup, q.util_ratio,
                  q.quality_within_spread ? "within the spread" : "OUTSIDE the spread");
    out += line;
  }
  return out;
}

std::string PipelineJson(const PipelineSummary& s, const std::vector<PipelineRun>& runs,
                         double env_latency_ms, int steps) {
  json doc = {{"steps", steps},
              {"cores", int(std::thread::hardware_concurrency())},
              {"env_latency_ms", env_latency_ms},
              {"runs", json::array()},
              {"ratios", json::array()}};
  for (const PipelineRow& r : s.rows) {
    doc["runs"].push_back({{"mode", r.mode},
                           {"tenants", r.tenants},
                           {"seeds", r.seeds},
                           {"runs", r.runs},
                           {"complete", r.complete},
                           {"wall_s", r.wall_s},
                           {"util_rollout", r.util_rollout},
                           {"util_trainer", r.util_trainer},
                           {"util_verifier", r.util_verifier},
                           {"idle_fraction", r.idle_fraction},
                           {"samples_per_s", r.samples_per_s},
                           {"final_reward_mean", r.final_reward_mean},
                           {"final_reward_spread", r.final_reward_spread},
                           {"tenant_final_reward", r.tenant_reward_mean},
                           {"tenant_final_reward_spread", r.tenant_reward_spread},
                           {"staleness_histogram", r.staleness},
                           {"groups_dropped", r.groups_dropped}});
  }
  for (const PipelineRatio& q : s.ratios) {
    doc["ratios"].push_back({{"tenants", q.tenants},
                             {"speedup_async_vs_sequential", q.speedup},
                             {"speedup_multi_sync_vs_sequential", q.multi_speedup},
                             {"util_ratio_async_vs_sequential", q.util_ratio},
                             {"quality_within_spread", q.quality_within_spread}});
  }
  doc["targets"] = json::array();
  for (const Target& t : s.targets) {
    doc["targets"].push_back({{"name", t.name},
                              {"value", t.value},
                              {"threshold", t.threshold},
                              {"higher_is_better", t.higher_is_better},
                              {"met", t.met()}});
  }
  doc["measured"] = json::array();
  for (const PipelineRun& r : runs)
    doc["measured"].push_back(sim::MeasuredRunToJson(ToMeasuredRun(r)));
  return doc.dump(2) + "\n";
}

}  // namespace marlaas::bench

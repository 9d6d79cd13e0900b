#include "bench/sim/measured_run.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>

namespace marlaas::sim {
namespace {

using nlohmann::json;

// How CostSums::Add weighs a pass. Sums recorded another way (older builds summed unweighted)
// would fit a different line, so they are refused rather than mixed.
constexpr const char* kSumWeights = "1/seconds^2";

json SumsToJson(const CostSums& s) {
  json xtx = json::array();
  for (const auto& row : s.xtx)
    xtx.push_back(json(std::vector<double>(row, row + CostSums::kTerms)));
  return {{"weights", kSumWeights},
          {"n", s.n},
          {"xtx", xtx},
          {"xty", std::vector<double>(s.xty, s.xty + CostSums::kTerms)},
          {"yy", s.yy}};
}

Status Bad(const std::string& where, const std::string& field, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, where + ": " + field + ": " + why);
}

Status SumsFromJson(const json& j, const std::string& where, const std::string& field,
                    CostSums* out) {
  *out = CostSums{};
  if (!j.is_object() || !j.contains("n") || !j.contains("xtx") || !j.contains("xty") ||
      !j.contains("yy"))
    return Bad(where, field, "must be an object with n, xtx, xty and yy");
  if (!j.contains("weights") || !j["weights"].is_string() || j["weights"] != kSumWeights)
    return Bad(where, field + ".weights",
               std::string("must be \"") + kSumWeights +
                   "\" (sums from an older build are weighted differently: rerun bench pipeline)");
  const json &xtx = j["xtx"], &xty = j["xty"];
  if (!j["n"].is_number_unsigned() || !j["yy"].is_number() || !xtx.is_array() ||
      xtx.size() != CostSums::kTerms || !xty.is_array() || xty.size() != CostSums::kTerms)
    return Bad(where, field,
               "n must be a count, xtx 5x5 and xty 5 numbers (4: sums from an older build, "
               "without the cold-start term: rerun bench pipeline)");
  out->n = j["n"].get<uint64_t>();
  out->yy = j["yy"].get<double>();
  // Sums of a run's passes: a pass count past 2^40 or a sum past 1e200 is no measurement, and
  // pooled with others it would wrap or overflow the fit.
  auto sane = [](double v) { return std::isfinite(v) && std::fabs(v) <= 1e200; };
  if (out->n > (uint64_t(1) << 40) || !sane(out->yy) || out->yy < 0)
    return Bad(where, field, "n must be at most 2^40 and yy a number in [0, 1e200]");
  for (int r = 0; r < CostSums::kTerms; ++r) {
    if (!xtx[r].is_array() || xtx[r].size() != CostSums::kTerms || !xty[r].is_number())
      return Bad(where, field, "xtx must be 5x5 numbers");
    out->xty[r] = xty[r].get<double>();
    for (int c = 0; c < CostSums::kTerms; ++c) {
      if (!xtx[r][c].is_number()) return Bad(where, field, "xtx must be 5x5 numbers");
      out->xtx[r][c] = xtx[r][c].get<double>();
      if (!sane(out->xtx[r][c]) || (r == c && out->xtx[r][c] < 0))
        return Bad(where, field, "xtx must be 5x5 numbers within 1e200, its diagonal >= 0");
    }
    if (!sane(out->xty[r])) return Bad(where, field, "xty must be numbers within 1e200");
  }
  return Status::Ok();
}

// A count: a whole number >= 0 (nlohmann converts -1 to 2^64 - 1 without a word). Absent, it is
// `fallback` when not `required` (a field older files lack).
Status CountField(const json& o, const char* key, bool required, uint64_t fallback,
                  const std::string& where, const std::string& field, uint64_t* out) {
  if (!o.contains(key)) {
    if (required) return Bad(where, field + "." + key, "missing");
    *out = fallback;
    return Status::Ok();
  }
  // (A document parsed from text holds 2 as unsigned; one built in memory from an int, signed.)
  if (!o[key].is_number_integer() || (!o[key].is_number_unsigned() && o[key].get<int64_t>() < 0))
    return Bad(where, field + "." + key, "must be a whole number >= 0, not " + o[key].dump());
  *out = o[key].get<uint64_t>();
  return Status::Ok();
}

// clang-format off
#define MARLAAS_TASK_SUM_FIELDS(X)                                                      \
  X(tenants) X(groups_started) X(prompt_tokens) X(completions) X(completion_tokens)     \
  X(groups_scored) X(work_ns) X(tool_calls) X(tool_ns) X(groups_trained)                \
  X(groups_degenerate) X(rows_trained) X(tokens_trained) X(padded_tokens_trained)
// clang-format on

double Ratio(double num, double den, double fallback) { return den > 0 ? num / den : fallback; }

std::string Number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

json MeasuredRunToJson(const MeasuredRun& r) {
  json tasks = json::object();
  for (const auto& [name, t] : r.costs.tasks) {
    json o;
#define MARLAAS_TO_JSON(f) o[#f] = t.f;
    MARLAAS_TASK_SUM_FIELDS(MARLAAS_TO_JSON)
#undef MARLAAS_TO_JSON
    o["tool_calls_shared"] = t.tool_calls_shared;
    o["prefix_rows_trained"] = t.prefix_rows_trained;
    o["prefix_tokens_trained"] = t.prefix_tokens_trained;
    tasks[name] = o;
  }
  return {{"mode", r.mode},
          {"tenants", r.tenants},
          {"seed", r.seed},
          {"complete", r.complete},
          {"wall_s", r.wall_s},
          {"util_rollout", r.util_rollout},
          {"util_trainer", r.util_trainer},
          {"tasks", r.tasks},
          {"steps", r.steps},
          {"group_size", r.group_size},
          {"prompts_per_step", r.prompts_per_step},
          {"max_staleness", r.max_staleness},
          {"checkpoint_every", r.checkpoint_every},
          {"verifier_workers", r.verifier_workers},
          {"env_latency_ms", r.env_latency_ms},
          {"costs",
           {{"rollout", SumsToJson(r.costs.rollout)},
            {"trainer", SumsToJson(r.costs.trainer)},
            {"checkpoints", r.costs.checkpoints},
            {"checkpoint_ns", r.costs.checkpoint_ns},
            {"admissions", r.costs.admissions},
            {"admit_ns", r.costs.admit_ns},
            {"settles", r.costs.settles},
            {"settle_ns", r.costs.settle_ns},
            {"tasks", tasks}}}};
}

Result<MeasuredRun> MeasuredRunFromJson(const json& j, const std::string& where) {
  MeasuredRun r;
  if (!j.is_object()) return Bad(where, "run", "must be an object");
  try {
    r.mode = j.at("mode").get<std::string>();
    r.complete = j.at("complete").get<bool>();
    r.tasks = j.at("tasks").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    return Bad(where, "run", std::string("missing or mistyped field (") + e.what() + ")");
  }
  if (r.mode != "sequential_sync" && r.mode != "multi_tenant_sync" && r.mode != "async")
    return Bad(where, "mode", "unknown mode '" + r.mode + "'");
  // Whole numbers within what bench pipeline and a job spec allow: nlohmann's get<int>() turns
  // 2.7 into 2 and 2^32 + 1 into 1, and a run of 2e9 steps would be simulated for hours.
  uint64_t seed = 0;
  MARLAAS_RETURN_IF_ERROR(CountField(j, "seed", true, 0, where, "run", &seed));
  r.seed = seed;
  for (const auto& [key, lo, hi, out] : {std::tuple{"tenants", 1, kMaxSimTenants, &r.tenants},
                                         {"steps", 1, 100000, &r.steps},
                                         {"group_size", 1, 256, &r.group_size},
                                         {"prompts_per_step", 1, 1024, &r.prompts_per_step},
                                         {"max_staleness", 0, 16, &r.max_staleness},
                                         {"checkpoint_every", 1, 1000000, &r.checkpoint_every},
                                         {"verifier_workers", 1, 256, &r.verifier_workers}}) {
    uint64_t v = 0;
    MARLAAS_RETURN_IF_ERROR(CountField(j, key, true, 0, where, "run", &v));
    if (v < uint64_t(lo) || v > uint64_t(hi))
      return Bad(where, std::string("run.") + key,
                 "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], not " +
                     std::to_string(v));
    *out = int(v);
  }
  for (const auto& [key, lo, hi, out] : {std::tuple{"wall_s", 1e-6, 1e7, &r.wall_s},
                                         {"util_rollout", 0.0, 64.0, &r.util_rollout},
                                         {"util_trainer", 0.0, 64.0, &r.util_trainer},
                                         {"env_latency_ms", 0.0, 600000.0, &r.env_latency_ms}}) {
    if (!j.contains(key) || !j[key].is_number() || !(j[key].get<double>() >= lo) ||
        !(j[key].get<double>() <= hi))
      return Bad(where, std::string("run.") + key,
                 "must be a number in [" + Number(lo) + ", " + Number(hi) + "], not " +
                     (j.contains(key) ? j[key].dump() : std::string("missing")));
    *out = j[key].get<double>();
  }
  if (size_t(r.tenants) != r.tasks.size())
    return Bad(where, "tasks", "must name one task per tenant");
  if (!j.contains("costs") || !j["costs"].is_object())
    return Bad(where, "costs", "missing (written by marlaas bench pipeline)");
  const json& c = j["costs"];
  MARLAAS_RETURN_IF_ERROR(
      SumsFromJson(c.value("rollout", json()), where, "costs.rollout", &r.costs.rollout));
  MARLAAS_RETURN_IF_ERROR(
      SumsFromJson(c.value("trainer", json()), where, "costs.trainer", &r.costs.trainer));
  RunCosts& rc = r.costs;
  MARLAAS_RETURN_IF_ERROR(CountField(c, "checkpoints", true, 0, where, "costs", &rc.checkpoints));
  MARLAAS_RETURN_IF_ERROR(
      CountField(c, "checkpoint_ns", true, 0, where, "costs", &rc.checkpoint_ns));
  // Older files have no admission times: their admissions cost nothing in the replay.
  MARLAAS_RETURN_IF_ERROR(CountField(c, "admissions", false, 0, where, "costs", &rc.admissions));
  MARLAAS_RETURN_IF_ERROR(CountField(c, "admit_ns", false, 0, where, "costs", &rc.admit_ns));
  MARLAAS_RETURN_IF_ERROR(CountField(c, "settles", false, 0, where, "costs", &rc.settles));
  MARLAAS_RETURN_IF_ERROR(CountField(c, "settle_ns", false, 0, where, "costs", &rc.settle_ns));
  if (!c.contains("tasks") || !c["tasks"].is_object())
    return Bad(where, "costs.tasks", "must be an object");
  for (auto it = c["tasks"].begin(); it != c["tasks"].end(); ++it) {
    TaskCostSums t;
    const std::string field = "costs.tasks." + it.key();
    const json& o = it.value();
    if (!o.is_object()) return Bad(where, field, "must be an object");
#define MARLAAS_FROM_JSON(f) \
  MARLAAS_RETURN_IF_ERROR(CountField(o, #f, true, 0, where, field, &t.f));
    MARLAAS_TASK_SUM_FIELDS(MARLAAS_FROM_JSON)
#undef MARLAAS_FROM_JSON
    // Older files have no count of shared calls: their calls are all replayed as distinct ...
    MARLAAS_RETURN_IF_ERROR(
        CountField(o, "tool_calls_shared", false, 0, where, field, &t.tool_calls_shared));
    // ... nor the split of the padded positions: their rows are bucketed by the whole.
    MARLAAS_RETURN_IF_ERROR(
        CountField(o, "prefix_rows_trained", false, 0, where, field, &t.prefix_rows_trained));
    MARLAAS_RETURN_IF_ERROR(
        CountField(o, "prefix_tokens_trained", false, 0, where, field, &t.prefix_tokens_trained));
    r.costs.tasks[it.key()] = t;
  }
  return r;
}

std::map<std::string, TaskCost> TaskCostsOf(const std::map<std::string, TaskCostSums>& tasks) {
  std::map<std::string, TaskCost> out;
  for (const auto& [task, s] : tasks) {
    TaskCost t;
    t.prompt_tokens = Ratio(double(s.prompt_tokens), double(s.groups_started), t.prompt_tokens);
    t.completion_tokens =
        Ratio(double(s.completion_tokens), double(s.completions), t.completion_tokens);
    t.tool_calls = Ratio(double(s.tool_calls), double(s.completions), 0);
    t.shared_tool_calls =
        std::min(1.0, Ratio(double(s.tool_calls_shared), double(s.tool_calls), 0));
    t.verify_s = Ratio(double(s.work_ns) * 1e-9, double(s.groups_scored), 0);
    t.tool_s = Ratio(double(s.tool_ns) * 1e-9, double(s.tool_calls), 0);
    t.degenerate = Ratio(double(s.groups_degenerate), double(s.groups_trained), 0);
    t.trained_tokens = Ratio(double(s.padded_tokens_trained), double(s.rows_trained),
                             t.prompt_tokens + t.completion_tokens);
    if (s.prefix_tokens_trained > 0 || s.prefix_rows_trained > 0) {
      t.prompt_rows = Ratio(double(s.prefix_rows_trained), double(s.rows_trained), 0);
      t.prompt_row_tokens =
          Ratio(double(s.prefix_tokens_trained), double(s.prefix_rows_trained), 0);
    }
    out[task] = t;
  }
  return out;
}

void MergeRunCosts(const RunCosts& from, RunCosts* into) {
  into->rollout.Merge(from.rollout);
  into->trainer.Merge(from.trainer);
  into->checkpoints += from.checkpoints;
  into->checkpoint_ns += from.checkpoint_ns;
  into->admissions += from.admissions;
  into->admit_ns += from.admit_ns;
  into->settles += from.settles;
  into->settle_ns += from.settle_ns;
  for (const auto& [task, t] : from.tasks) {
    TaskCostSums& s = into->tasks[task];
#define MARLAAS_ADD(f) s.f += t.f;
    MARLAAS_TASK_SUM_FIELDS(MARLAAS_ADD)
#undef MARLAAS_ADD
    s.tool_calls_shared += t.tool_calls_shared;
    s.prefix_rows_trained += t.prefix_rows_trained;
    s.prefix_tokens_trained += t.prefix_tokens_trained;
  }
}

void ApplyIoCosts(const RunCosts& c, CostProfile* p) {
  p->checkpoint_s = Ratio(double(c.checkpoint_ns) * 1e-9, double(c.checkpoints), p->checkpoint_s);
  p->admit_s = Ratio(double(c.admit_ns) * 1e-9, double(c.admissions), p->admit_s);
  p->settle_s = Ratio(double(c.settle_ns) * 1e-9, double(c.settles), p->settle_s);
}

Result<CostProfile> CalibrateProfile(const std::vector<MeasuredRun>& runs, int cores,
                                     const std::string& name) {
  RunCosts pooled;
  for (const MeasuredRun& r : runs) MergeRunCosts(r.costs, &pooled);
  const CostSums& rollout = pooled.rollout;
  const CostSums& trainer = pooled.trainer;
  CostProfile p;
  p.name = name;
  p.placement = "shared";
  p.cores = cores;
  p.host_cores = cores;
  auto fit_rollout = FitLinearCost(rollout);
  if (!fit_rollout.ok())
    return Status(StatusCode::kInvalidArgument, "rollout: " + fit_rollout.status().message());
  auto fit_trainer = FitLinearCost(trainer);
  if (!fit_trainer.ok())
    return Status(StatusCode::kInvalidArgument, "trainer: " + fit_trainer.status().message());
  p.rollout = *fit_rollout;
  p.trainer = *fit_trainer;
  ApplyIoCosts(pooled, &p);
  p.tasks = TaskCostsOf(pooled.tasks);
  return p;
}

}  // namespace marlaas::sim

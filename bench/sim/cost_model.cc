#include "bench/sim/cost_model.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace marlaas::sim {
namespace {

using nlohmann::json;

// Solves A x = b (n <= 4) by Gaussian elimination with partial pivoting; false when singular.
bool Solve(std::vector<std::vector<double>> a, std::vector<double> b, std::vector<double>* x) {
  const size_t n = b.size();
  double scale = 0;
  for (const auto& row : a)
    for (double v : row) scale = std::max(scale, std::fabs(v));
  if (scale == 0) return false;
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t r = col + 1; r < n; ++r)
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    if (std::fabs(a[pivot][col]) <= 1e-12 * scale) return false;
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (size_t r = col + 1; r < n; ++r) {
      const double f = a[r][col] / a[col][col];
      for (size_t k = col; k < n; ++k) a[r][k] -= f * a[col][k];
      b[r] -= f * b[col];
    }
  }
  x->assign(n, 0.0);
  for (size_t i = n; i-- > 0;) {
    double s = b[i];
    for (size_t k = i + 1; k < n; ++k) s -= a[i][k] * (*x)[k];
    (*x)[i] = s / a[i][i];
  }
  return true;
}

Status FieldError(const std::string& field, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "cost profile: " + field + ": " + why);
}

Status CheckKeys(const json& obj, const std::string& where, const std::set<std::string>& known) {
  if (!obj.is_object()) return FieldError(where.empty() ? "document" : where, "must be an object");
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!known.count(it.key()))
      return FieldError((where.empty() ? "" : where + ".") + it.key(), "unknown field");
  }
  return Status::Ok();
}

Status ReadNumber(const json& obj, const std::string& where, const std::string& key, double lo,
                  double hi, double* out) {
  if (!obj.contains(key)) return Status::Ok();
  const json& v = obj.at(key);
  const std::string field = where.empty() ? key : where + "." + key;
  if (!v.is_number()) return FieldError(field, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi)
    return FieldError(field, "must be in [" + json(lo).dump() + ", " + json(hi).dump() + "]");
  *out = d;
  return Status::Ok();
}

Status ReadInt(const json& obj, const std::string& key, int lo, int hi, int* out) {
  double d = *out;
  MARLAAS_RETURN_IF_ERROR(ReadNumber(obj, "", key, lo, hi, &d));
  if (d != std::floor(d)) return FieldError(key, "must be a whole number");
  *out = int(d);
  return Status::Ok();
}

Status ReadCost(const json& doc, const std::string& key, LinearCost* out) {
  if (!doc.contains(key)) return FieldError(key, "missing (5 coefficients)");
  const json& v = doc.at(key);
  // 4: a profile without the cold-start term (written before it existed).
  if (!v.is_array() || (v.size() != CostSums::kTerms && v.size() != CostSums::kTerms - 1))
    return FieldError(key, "must be an array of 5 numbers (or 4, without the cold-start term)");
  out->c = {};
  for (size_t i = 0; i < v.size(); ++i) {
    // Seconds a pass costs, per term: above an hour per row or token it is no measurement, and
    // a pass of 1e308 s stalled the simulator's clock.
    if (!v[i].is_number() || !(v[i].get<double>() >= 0) || !(v[i].get<double>() <= 3600))
      return FieldError(key + "[" + std::to_string(i) + "]", "must be a number in [0, 3600] (s)");
    out->c[i] = v[i].get<double>();
  }
  return Status::Ok();
}

}  // namespace

Result<LinearCost> FitLinearCost(const CostSums& sums) {
  if (sums.n < 2) {
    return Status(StatusCode::kInvalidArgument,
                  "cost fit: " + std::to_string(sums.n) + " passes measured, at least 2 needed");
  }
  const double wsum = sums.xtx[0][0];  // the sum of the weights
  LinearCost best;
  double best_rss = std::numeric_limits<double>::infinity();
  for (int mask = 1; mask < (1 << CostSums::kTerms); ++mask) {
    std::vector<int> idx;
    bool varies = true;
    for (int j = 0; j < CostSums::kTerms; ++j) {
      if (!(mask & (1 << j))) continue;
      if (j > 0) {  // a regressor that never varied is the constant's job
        const double mean = sums.xtx[0][j] / wsum, var = sums.xtx[j][j] / wsum - mean * mean;
        varies = varies && var > 1e-9 * (1 + mean * mean);
      }
      idx.push_back(j);
    }
    if (!varies) continue;
    std::vector<std::vector<double>> a(idx.size(), std::vector<double>(idx.size()));
    std::vector<double> b(idx.size()), x;
    for (size_t r = 0; r < idx.size(); ++r) {
      for (size_t c = 0; c < idx.size(); ++c) a[r][c] = sums.xtx[idx[r]][idx[c]];
      b[r] = sums.xty[idx[r]];
    }
    if (!Solve(a, b, &x)) continue;
    bool non_negative = true;
    for (double& v : x) {
      non_negative = non_negative && v >= -1e-15;  // rounding of an exact zero passes
      v = std::max(v, 0.0);
    }
    if (!non_negative) continue;
    double rss = sums.yy;
    for (size_t r = 0; r < idx.size(); ++r) {
      rss -= 2 * x[r] * b[r];
      for (size_t c = 0; c < idx.size(); ++c) rss += x[r] * a[r][c] * x[c];
    }
    if (rss < best_rss - 1e-15) {
      best_rss = rss;
      best = LinearCost{};
      for (size_t r = 0; r < idx.size(); ++r) best.c[size_t(idx[r])] = x[r];
    }
  }
  if (!std::isfinite(best_rss))
    return Status(StatusCode::kInvalidArgument, "cost fit: no non-negative fit");
  return best;
}

Result<CostProfile> CostProfileFromJson(const std::string& text) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded()) return FieldError("document", "not valid JSON");
  MARLAAS_RETURN_IF_ERROR(CheckKeys(
      doc, "",
      {"name", "placement", "cores", "host_cores", "max_active_sequences", "adapter_sync_s",
       "checkpoint_s", "admit_s", "settle_s", "rollout", "trainer", "tasks"}));
  CostProfile p;
  if (doc.contains("name")) {
    if (!doc["name"].is_string()) return FieldError("name", "must be a string");
    p.name = doc["name"].get<std::string>();
  }
  if (doc.contains("placement")) {
    if (!doc["placement"].is_string() ||
        (doc["placement"] != "shared" && doc["placement"] != "accelerator"))
      return FieldError("placement", "must be \"shared\" or \"accelerator\"");
    p.placement = doc["placement"].get<std::string>();
  }
  MARLAAS_RETURN_IF_ERROR(ReadInt(doc, "cores", 1, 4096, &p.cores));
  MARLAAS_RETURN_IF_ERROR(ReadInt(doc, "host_cores", 1, 65536, &p.host_cores));
  MARLAAS_RETURN_IF_ERROR(
      ReadInt(doc, "max_active_sequences", 1, 1 << 20, &p.max_active_sequences));
  MARLAAS_RETURN_IF_ERROR(ReadNumber(doc, "", "adapter_sync_s", 0, 60, &p.adapter_sync_s));
  MARLAAS_RETURN_IF_ERROR(ReadNumber(doc, "", "checkpoint_s", 0, 3600, &p.checkpoint_s));
  MARLAAS_RETURN_IF_ERROR(ReadNumber(doc, "", "admit_s", 0, 60, &p.admit_s));
  MARLAAS_RETURN_IF_ERROR(ReadNumber(doc, "", "settle_s", 0, 60, &p.settle_s));
  MARLAAS_RETURN_IF_ERROR(ReadCost(doc, "rollout", &p.rollout));
  MARLAAS_RETURN_IF_ERROR(ReadCost(doc, "trainer", &p.trainer));
  if (doc.contains("tasks")) {
    if (!doc["tasks"].is_object()) return FieldError("tasks", "must be an object");
    for (auto it = doc["tasks"].begin(); it != doc["tasks"].end(); ++it) {
      const std::string where = "tasks." + it.key();
      MARLAAS_RETURN_IF_ERROR(CheckKeys(
          it.value(), where,
          {"prompt_tokens", "completion_tokens", "tool_calls", "shared_tool_calls", "verify_s",
           "tool_s", "degenerate", "trained_tokens", "prompt_rows", "prompt_row_tokens"}));
      TaskCost t;
      MARLAAS_RETURN_IF_ERROR(ReadNumber(*it, where, "prompt_tokens", 1, 1e6, &t.prompt_tokens));
      MARLAAS_RETURN_IF_ERROR(
          ReadNumber(*it, where, "completion_tokens", 1, 1e6, &t.completion_tokens));
      MARLAAS_RETURN_IF_ERROR(ReadNumber(*it, where, "tool_calls", 0, 1000, &t.tool_calls));
      MARLAAS_RETURN_IF_ERROR(
          ReadNumber(*it, where, "shared_tool_calls", 0, 1, &t.shared_tool_calls));
      MARLAAS_RETURN_IF_ERROR(ReadNumber(*it, where, "verify_s", 0, 3600, &t.verify_s));
      MARLAAS_RETURN_IF_ERROR(ReadNumber(*it, where, "tool_s", 0, 3600, &t.tool_s));
      MARLAAS_RETURN_IF_ERROR(ReadNumber(*it, where, "degenerate", 0, 1, &t.degenerate));
      MARLAAS_RETURN_IF_ERROR(ReadNumber(*it, where, "trained_tokens", 1, 1e7, &t.trained_tokens));
      MARLAAS_RETURN_IF_ERROR(ReadNumber(*it, where, "prompt_rows", 0, 1, &t.prompt_rows));
      MARLAAS_RETURN_IF_ERROR(
          ReadNumber(*it, where, "prompt_row_tokens", 0, 1e7, &t.prompt_row_tokens));
      if (t.prompt_rows * t.prompt_row_tokens >= t.trained_tokens)
        return FieldError(where + ".prompt_rows",
                          "prompt_rows x prompt_row_tokens must be below trained_tokens");
      p.tasks[it.key()] = t;
    }
  }
  return p;
}

std::string CostProfileToJson(const CostProfile& p) {
  json doc = {{"name", p.name},
              {"placement", p.placement},
              {"cores", p.cores},
              {"host_cores", p.host_cores},
              {"max_active_sequences", p.max_active_sequences},
              {"adapter_sync_s", p.adapter_sync_s},
              {"checkpoint_s", p.checkpoint_s},
              {"admit_s", p.admit_s},
              {"settle_s", p.settle_s},
              {"rollout", p.rollout.c},
              {"trainer", p.trainer.c},
              {"tasks", json::object()}};
  for (const auto& [name, t] : p.tasks) {
    doc["tasks"][name] = {
        {"prompt_tokens", t.prompt_tokens}, {"completion_tokens", t.completion_tokens},
        {"tool_calls", t.tool_calls},       {"shared_tool_calls", t.shared_tool_calls},
        {"verify_s", t.verify_s},           {"tool_s", t.tool_s},
        {"degenerate", t.degenerate},       {"trained_tokens", t.trained_tokens},
        {"prompt_rows", t.prompt_rows},     {"prompt_row_tokens", t.prompt_row_tokens}};
  }
  return doc.dump(2) + "\n";
}

}  // namespace marlaas::sim

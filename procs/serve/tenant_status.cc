#include "procs/serve/tenant_status.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/utf8.h"
#include "procs/common/pipeline.h"

namespace marlaas::serve {
namespace {

namespace fs = std::filesystem;

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The step, adapter version and reward of the tenant's last whole line of steps.jsonl (the
// trainer appends one a step), into `s`; false when there is none.
bool FiguresFromStepsLog(const std::string& dir, pb::TenantStatus* s) {
  auto text = ReadFile(dir + "/steps.jsonl");
  if (!text.ok()) return false;
  size_t end = text->size();
  while (end > 0) {
    const size_t start = text->rfind('\n', end - 1);
    const size_t from = start == std::string::npos ? 0 : start + 1;
    const nlohmann::json line =
        nlohmann::json::parse(text->substr(from, end - from), nullptr, false);
    if (line.is_object() && line.contains("step") && line["step"].is_number_unsigned()) {
      s->set_step(uint32_t(std::min<uint64_t>(line["step"].get<uint64_t>(), UINT32_MAX)));
      if (line.contains("version") && line["version"].is_number_unsigned())
        s->set_adapter_version(
            uint32_t(std::min<uint64_t>(line["version"].get<uint64_t>(), UINT32_MAX)));
      if (line.contains("reward_mean") && line["reward_mean"].is_number())
        s->set_reward_mean(line["reward_mean"].get<double>());
      return true;
    }
    if (start == std::string::npos) break;
    end = start;
  }
  return false;
}

}  // namespace

pb::TenantStatus TenantStatusOf(const TenantView& v) {
  pb::TenantStatus s;
  s.set_id(v.record.id);
  s.set_task(v.record.task);
  s.set_state(TenantStateName(v.record.state));
  s.set_step(uint32_t(std::min<uint64_t>(v.trainer.steps, UINT32_MAX)));
  s.set_reward_mean(v.trainer.last_reward_mean);
  const TenantMetrics& r = v.verifier;
  if (r.reward_count > 0) {
    const double mean = r.reward_sum / double(r.reward_count);
    s.set_reward_std(
        std::sqrt(std::max(0.0, r.reward_sq_sum / double(r.reward_count) - mean * mean)));
  }
  uint32_t staleness = 0;  // the largest staleness the trainer has seen in this tenant's groups
  for (int b = 0; b < kStalenessBuckets; ++b)
    if (v.trainer.staleness[b] > 0) staleness = uint32_t(b);
  s.set_staleness(staleness);
  const uint64_t judged = v.verifier.groups + v.verifier.verifier_errors;
  s.set_verifier_error_rate(judged ? double(v.verifier.verifier_errors) / double(judged) : 0.0);
  s.set_adapter_version(uint32_t(std::min<uint64_t>(v.trainer.adapter_version, UINT32_MAX)));
  // Tokens per second over the tenant's life: up to now, or up to when it settled.
  const int64_t end_ms = v.record.settled_unix_ms > 0
                             ? v.record.settled_unix_ms
                             : std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
  const double alive_s = double(end_ms - int64_t(v.record.admitted_unix_ms)) / 1000.0;
  if (alive_s > 0) s.set_tokens_per_s(double(v.rollout.tokens) / alive_s);
  s.set_reason(ValidUtf8(v.record.reason));  // a verifier's stderr, cut at a byte limit
  // A running tenant's trainer problem that does not fail it (a checkpoint that cannot be
  // written): shown until it is over, rather than nothing.
  if (v.record.state == TenantState::kRunning && s.reason().empty() &&
      v.trainer.generation == v.record.generation && v.trainer.last_error[0] != '\0') {
    const size_t n = strnlen(v.trainer.last_error, sizeof(v.trainer.last_error));
    s.set_reason("trainer: " + ValidUtf8(std::string(v.trainer.last_error, n)));
  }
  return s;
}

Status WriteSettledStatus(const std::string& tenant_dir, const pb::TenantStatus& status) {
  std::string json;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  const auto st = google::protobuf::util::MessageToJsonString(status, &json, o);
  if (!st.ok()) return Status(StatusCode::kInternal, "tenant status to JSON: " + st.ToString());
  return WriteFileAtomically(tenant_dir + "/status.json", json + "\n");
}

std::vector<pb::TenantStatus> SettledTenantsOnDisk(const std::string& state_dir,
                                                   const std::set<std::string>& except) {
  std::vector<pb::TenantStatus> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(state_dir + "/tenants", ec)) {
    const std::string id = entry.path().filename().string(), dir = entry.path().string();
    if (except.count(id)) continue;
    auto state = ReadFile(dir + "/state");  // "finished", "stopped: why", "failed: why"
    if (!state.ok()) continue;              // not settled (or not a tenant)
    pb::TenantStatus s;
    auto json = ReadFile(dir + "/status.json");
    google::protobuf::util::JsonParseOptions po;
    po.ignore_unknown_fields = true;
    if (!json.ok() || !google::protobuf::util::JsonStringToMessage(*json, &s, po).ok() ||
        s.id() != id) {
      s.Clear();
      s.set_id(id);
      const std::string text = Trimmed(*state);
      const size_t colon = text.find(": ");
      s.set_state(ValidUtf8(text.substr(0, colon)));
      if (colon != std::string::npos) s.set_reason(ValidUtf8(text.substr(colon + 2)));
      auto job = pipeline::LoadTenantJob(state_dir, id);
      if (job.ok()) s.set_task(job->task());
      // The figures from the trainer's log instead of zeros that look like results; a damaged
      // file (not one an older version never wrote) is said so.
      const bool figures = FiguresFromStepsLog(dir, &s);
      if (json.ok()) {
        s.set_reason(s.reason() + (s.reason().empty() ? "" : "; ") + dir +
                     "/status.json is damaged" +
                     (figures ? ": step, reward and version are from steps.jsonl" : ""));
      }
    }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const pb::TenantStatus& a, const pb::TenantStatus& b) { return a.id() < b.id(); });
  return out;
}

}  // namespace marlaas::serve

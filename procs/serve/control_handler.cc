#include "procs/serve/control_handler.h"

#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>

#include "base/file_util.h"
#include "procs/common/pipeline.h"

namespace marlaas::serve {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kDefaultLogLines = 100, kMaxLogLines = 10000;

}  // namespace

pb::TenantStatus TenantStatusOf(const TenantView& v) {
  pb::TenantStatus s;
  s.set_id(v.record.id);
  s.set_task(v.record.task);
  s.set_state(TenantStateName(v.record.state));
  s.set_step(v.trainer.steps);
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
  s.set_adapter_version(v.trainer.adapter_version);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const double alive_s = double(now_ms - int64_t(v.record.admitted_unix_ms)) / 1000.0;
  if (alive_s > 0) s.set_tokens_per_s(double(v.rollout.tokens) / alive_s);
  s.set_reason(v.record.reason);
  return s;
}

Status ControlHandler::Authorise(const std::string& token, const std::string& tenant) const {
  if (!tokens_->Allows(token, tenant)) {
    // The same answer whether or not the tenant exists: ids are not disclosed to strangers.
    return Status(StatusCode::kInvalidArgument,
                  "not authorised for tenant '" + tenant + "' (its token or the admin token)");
  }
  return Status::Ok();
}

Status ControlHandler::Submit(const pb::SubmitRequest& r, pb::SubmitReply* out) {
  // An id is used once per state dir: its checkpoints, logs and token stay with it.
  const std::string dir =
      pipeline::TenantDir(service_->options().stage.state_dir, r.job().tenant());
  if (!r.job().tenant().empty() && fs::exists(dir + "/job.json")) {
    return Status(StatusCode::kAlreadyExists,
                  "tenant '" + r.job().tenant() + "' already exists in this state dir");
  }
  MARLAAS_RETURN_IF_ERROR(service_->Admit(r.job()));
  auto token = tokens_->Issue(r.job().tenant());
  if (!token.ok()) {  // a tenant nobody but the admin could reach: take it back
    (void)service_->StopTenant(r.job().tenant());
    return token.status().Annotate("admitted tenant stopped: its token could not be stored");
  }
  out->set_tenant(r.job().tenant());
  out->set_token(*token);
  return Status::Ok();
}

Status ControlHandler::StatusOf(const std::string& token, const pb::StatusRequest& r,
                                pb::StatusReply* out) {
  if (!r.tenant().empty()) MARLAAS_RETURN_IF_ERROR(Authorise(token, r.tenant()));
  for (const TenantView& v : service_->Tenants()) {
    if (!r.tenant().empty() ? r.tenant() != v.record.id : !tokens_->Allows(token, v.record.id))
      continue;
    *out->add_tenants() = TenantStatusOf(v);
  }
  if (!r.tenant().empty() && out->tenants_size() == 0)
    return Status(StatusCode::kNotFound, "no tenant '" + r.tenant() + "'");
  return Status::Ok();
}

Status ControlHandler::Export(const pb::ExportRequest& r) {
  if (r.out_dir().empty()) return Status(StatusCode::kInvalidArgument, "export needs --out DIR");
  const std::string ckpts =
      pipeline::TenantDir(service_->options().stage.state_dir, r.tenant()) + "/checkpoints";
  auto latest = ReadFile(ckpts + "/LATEST");
  if (!latest.ok()) {
    return Status(StatusCode::kNotFound,
                  "tenant '" + r.tenant() + "' has no checkpoint yet (nothing to export)");
  }
  std::string name = *latest;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  std::error_code ec;
  fs::create_directories(r.out_dir(), ec);
  if (ec) return Status(StatusCode::kIo, "creating " + r.out_dir() + ": " + ec.message());
  for (const char* file : {"adapter_config.json", "adapter_model.safetensors"}) {
    MARLAAS_ASSIGN_OR_RETURN(std::string bytes, ReadFile(ckpts + "/" + name + "/" + file));
    MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(r.out_dir() + "/" + file, bytes));
  }
  return Status::Ok();
}

Status ControlHandler::Logs(const pb::LogsRequest& r, pb::LogsReply* out) {
  const uint32_t n = r.max_lines() == 0 ? kDefaultLogLines : std::min(r.max_lines(), kMaxLogLines);
  const std::string dir = pipeline::TenantDir(service_->options().stage.state_dir, r.tenant());
  // The trainer's events (drops and their reasons, checkpoint trouble), then its steps.
  for (const char* file : {"trainer.log", "steps.jsonl"}) {
    std::ifstream f(dir + "/" + file);
    std::deque<std::string> tail;
    for (std::string line; std::getline(f, line);) {
      tail.push_back(std::string(file) + ": " + line);
      if (tail.size() > n) tail.pop_front();
    }
    for (std::string& l : tail) out->add_lines(std::move(l));
  }
  return Status::Ok();
}

pb::ControlReply ControlHandler::Handle(const pb::ControlRequest& req) {
  pb::ControlReply reply;
  reply.set_request_id(req.request_id());
  Status st;
  switch (req.command_case()) {
    case pb::ControlRequest::kSubmit:
      st = Submit(req.submit(), reply.mutable_submit());
      break;
    case pb::ControlRequest::kStatus:
      st = StatusOf(req.token(), req.status(), reply.mutable_status());
      break;
    case pb::ControlRequest::kStop:
      st = Authorise(req.token(), req.stop().tenant());
      if (st.ok()) st = service_->StopTenant(req.stop().tenant());
      break;
    case pb::ControlRequest::kExport:
      st = Authorise(req.token(), req.export_().tenant());
      if (st.ok()) st = Export(req.export_());
      break;
    case pb::ControlRequest::kLogs:
      st = Authorise(req.token(), req.logs().tenant());
      if (st.ok()) st = Logs(req.logs(), reply.mutable_logs());
      break;
    case pb::ControlRequest::COMMAND_NOT_SET:
      st = Status(StatusCode::kInvalidArgument, "the request names no command");
      break;
  }
  reply.set_ok(st.ok());
  if (!st.ok()) {
    reply.clear_result();
    reply.set_error(st.message());
  }
  return reply;
}

}  // namespace marlaas::serve

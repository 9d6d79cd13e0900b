#include "procs/serve/control_handler.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <vector>

#include "base/file_util.h"
#include "base/utf8.h"
#include "procs/common/checkpoint_files.h"
#include "procs/common/pipeline.h"
#include "procs/serve/control_frame.h"
#include "procs/serve/tenant_status.h"
#include "proto/job_spec.h"

namespace marlaas::serve {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kDefaultLogLines = 100, kMaxLogLines = 10000;

}  // namespace

Status ControlHandler::Authorise(const std::string& token, const std::string& tenant) const {
  // A malformed id names no tenant whatever the token (it was called "not authorised").
  if (!ValidTenantId(tenant)) {
    // Quoted in part: a 1 MiB id made a reply too large to send, and the reason was lost.
    const std::string shown = tenant.size() <= 80 ? tenant : tenant.substr(0, 80) + "...";
    return Status(StatusCode::kInvalidArgument,
                  "'" + shown + "' is not a tenant id (1-63 characters of a-z, 0-9, _ and -)");
  }
  if (!tokens_->Allows(token, tenant)) {
    // The same answer whether or not the tenant exists: ids are not disclosed to strangers.
    return Status(StatusCode::kInvalidArgument,
                  "not authorised for tenant '" + tenant + "' (its token or the admin token)");
  }
  return Status::Ok();
}

Result<std::string> ControlHandler::KnownTenantDir(const std::string& tenant) const {
  const std::string dir = pipeline::TenantDir(service_->options().stage.state_dir, tenant);
  if (!FileExists(dir + "/job.json"))
    return Status(StatusCode::kNotFound, "no tenant '" + tenant + "'");
  return dir;
}

Status ControlHandler::Submit(const pb::SubmitRequest& r, pb::SubmitReply* out) {
  // Admit refuses an id the state dir already holds: its checkpoints, logs and token stay with it.
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
  auto wanted = [&](const std::string& id) {
    return !r.tenant().empty() ? r.tenant() == id : tokens_->Allows(token, id);
  };
  std::set<std::string> with_rows;
  for (const TenantView& v : service_->Tenants()) {
    // A settled tenant is reported from the state dir below, as after a restart: the row keeps
    // only the first bytes of its reason.
    if (IsSettled(v.record.state) &&
        FileExists(pipeline::TenantDir(service_->options().stage.state_dir, v.record.id) +
                   "/state"))
      continue;
    with_rows.insert(v.record.id);
    if (wanted(v.record.id)) *out->add_tenants() = TenantStatusOf(v);
  }
  // Settled tenants whose rows were reused, or that settled before the service restarted.
  for (pb::TenantStatus& s : SettledTenantsOnDisk(service_->options().stage.state_dir, with_rows)) {
    if (wanted(s.id())) *out->add_tenants() = std::move(s);
  }
  if (!r.tenant().empty() && out->tenants_size() == 0)
    return Status(StatusCode::kNotFound, "no tenant '" + r.tenant() + "'");
  // A token that may see nothing: its tenant waits on disk (ResumeTenants had no room for it),
  // or it is a mistyped or foreign one. Said so, not an empty table.
  if (out->tenants_size() == 0 && !tokens_->IsAdmin(token)) {
    const std::string own = tokens_->TenantOf(token);
    if (!own.empty()) {
      return Status(StatusCode::kNotFound,
                    "tenant '" + own +
                        "' is on disk, unfinished, but this service has not loaded it (it had "
                        "no room when it started); it resumes with a later serve");
    }
    return Status(StatusCode::kInvalidArgument,
                  "this token is neither the admin token nor any tenant's");
  }
  return Status::Ok();
}

Status ControlHandler::Export(const pb::ExportRequest& r) {
  if (r.out_dir().empty()) return Status(StatusCode::kInvalidArgument, "export needs --out DIR");
  const std::string& state_dir = service_->options().stage.state_dir;
  MARLAAS_ASSIGN_OR_RETURN(const std::string tenant_dir, KnownTenantDir(r.tenant()));
  // The service prunes and reuses what lies in its state dir: an export there could be deleted
  // with a checkpoint, or be taken for a tenant.
  std::error_code ec;
  const auto resolved = [&ec](const std::string& p) {  // symlinks resolved, no trailing '/'
    const fs::path full = fs::weakly_canonical(fs::absolute(p, ec), ec).lexically_normal();
    return full.has_filename() ? full : full.parent_path();
  };
  const fs::path out = resolved(r.out_dir()), state = resolved(state_dir);
  if (std::mismatch(state.begin(), state.end(), out.begin(), out.end()).first == state.end()) {
    return Status(StatusCode::kInvalidArgument, r.out_dir() +
                                                    " is inside the service's state dir (" +
                                                    state_dir + "): export to a folder outside it");
  }
  constexpr const char* kExported[] = {"adapter_config.json", "adapter_model.safetensors"};
  // The folder written into may be new, empty, or an earlier export (those two files alone):
  // nothing else there is overwritten.
  if (fs::exists(fs::symlink_status(r.out_dir(), ec))) {
    if (!fs::is_directory(r.out_dir(), ec))
      return Status(StatusCode::kInvalidArgument, r.out_dir() + " is a file, not a folder");
    for (const auto& e : fs::directory_iterator(r.out_dir(), ec)) {
      const std::string n = e.path().filename().string();
      // (An export killed midway leaves <name>.tmp.<pid> beside them: part of an earlier one.)
      const bool ours = [&] {
        for (const char* f : kExported)
          if (n == f || n.rfind(std::string(f) + ".tmp.", 0) == 0) return true;
        return false;
      }();
      if (!ours) {
        return Status(StatusCode::kAlreadyExists,
                      r.out_dir() + " holds other files (" + n +
                          "): export into a new or empty folder, or an earlier export");
      }
    }
  }
  auto dir = pipeline::LatestCheckpointDir(tenant_dir);
  if (!dir.ok() && dir.status().code() == StatusCode::kNotFound) {
    return Status(StatusCode::kNotFound,
                  "tenant '" + r.tenant() + "' has no checkpoint yet (nothing to export)");
  }
  if (!dir.ok()) return dir.status();
  // Both files checked against the checkpoint's record before anything is written. The trainer
  // may replace the newest checkpoint meanwhile (it keeps two): a folder gone is read again.
  std::string bytes[2];
  for (int i = 0, again = 0; i < 2; ++i) {
    auto b = pipeline::ReadCheckedCheckpointFile(*dir, kExported[i]);
    if (!b.ok() && b.status().code() == StatusCode::kNotFound && !fs::exists(*dir) && again++ < 3) {
      dir = pipeline::LatestCheckpointDir(tenant_dir);
      if (!dir.ok()) return dir.status();
      i = -1;
      continue;
    }
    if (!b.ok()) {
      return Status(b.status().code(),
                    "the newest checkpoint is damaged, nothing exported: " + b.status().message() +
                        " (a restart of the trainer falls back to the one "
                        "before it)");
    }
    bytes[i] = std::move(*b);
  }
  fs::create_directories(r.out_dir(), ec);
  if (ec) return Status(StatusCode::kIo, "creating " + r.out_dir() + ": " + ec.message());
  for (int i = 0; i < 2; ++i)
    MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(r.out_dir() + "/" + kExported[i], bytes[i]));
  return Status::Ok();
}

Status ControlHandler::Logs(const pb::LogsRequest& r, pb::LogsReply* out) {
  const uint32_t n = r.max_lines() == 0 ? kDefaultLogLines : std::min(r.max_lines(), kMaxLogLines);
  MARLAAS_ASSIGN_OR_RETURN(const std::string dir, KnownTenantDir(r.tenant()));
  // The trainer's events (drops and their reasons, checkpoint trouble), then its steps.
  std::vector<std::string> lines;
  for (const char* file : {"trainer.log", "steps.jsonl"}) {
    std::ifstream f(dir + "/" + file);
    // Only its last frame's worth is read (from the first line that starts there): no more fits
    // a reply, and a long tenant's whole steps.jsonl, read at every request, held serve's loop.
    f.seekg(0, std::ios::end);
    const std::streamoff size = f ? std::streamoff(f.tellg()) : 0;
    const std::streamoff start = std::max<std::streamoff>(0, size - kMaxControlFrame);
    f.seekg(start);
    if (start > 0) f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    std::deque<std::string> tail;
    for (std::string line; std::getline(f, line);) {
      tail.push_back(std::string(file) + ": " + line);
      if (tail.size() > n) tail.pop_front();
    }
    for (const std::string& l : tail) lines.push_back(ValidUtf8(l));  // logs quote stderr
  }
  // The reply must fit one frame: the first lines go (the trainer's log, then the oldest steps),
  // and the reply says so.
  // (A step's line lists its groups and versions: a thousand lines of large steps pass 1 MiB.)
  constexpr size_t kBudget = kMaxControlFrame - 4096;  // the rest of the reply and line framing
  size_t bytes = 0;
  for (const std::string& l : lines) bytes += l.size() + 8;
  size_t drop = 0;
  while (bytes > kBudget && drop < lines.size()) bytes -= lines[drop++].size() + 8;
  if (drop > 0) {
    out->add_lines("(" + std::to_string(drop) +
                   " older lines left out: a reply holds at most 1 MiB; ask for fewer --lines)");
  }
  for (size_t i = drop; i < lines.size(); ++i) out->add_lines(std::move(lines[i]));
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
    reply.set_error(ValidUtf8(st.message()));
  }
  return reply;
}

}  // namespace marlaas::serve

// ControlHandler: what each control command does, and who may do it. Anyone who can open the
// control socket (mode 0600: the service's user) may submit; status, stop, export and logs of a
// tenant need that tenant's token or the admin token (tokens.h). A refused or failed command
// gets ok=false and an error that says why; nothing changes then.
//   submit JOB  -> admits the tenant (Service::Admit) and returns its id and a new token
//   status      -> every tenant the token may see (or the one named), settled ones included
//   stop T      -> Service::StopTenant
//   export T D  -> copies T's latest checkpointed adapter (PEFT layout) into D
//   logs T      -> the last lines of T's trainer log
// Not thread-safe: called from the service's thread.
#pragma once

#include <string>

#include "procs/serve/service.h"
#include "procs/serve/tokens.h"
#include "proto/marlaas.pb.h"

namespace marlaas::serve {

class ControlHandler {
 public:
  ControlHandler(Service* service, Tokens* tokens) : service_(service), tokens_(tokens) {}
  pb::ControlReply Handle(const pb::ControlRequest& request);

 private:
  Status Submit(const pb::SubmitRequest& r, pb::SubmitReply* out);
  Status StatusOf(const std::string& token, const pb::StatusRequest& r, pb::StatusReply* out);
  Status Export(const pb::ExportRequest& r);
  Status Logs(const pb::LogsRequest& r, pb::LogsReply* out);
  Status Authorise(const std::string& token, const std::string& tenant) const;
  // <state>/tenants/<tenant> when the state dir holds that tenant (its job.json), else kNotFound
  // "no tenant '<tenant>'", the words status uses.
  Result<std::string> KnownTenantDir(const std::string& tenant) const;

  Service* service_;
  Tokens* tokens_;
};

}  // namespace marlaas::serve

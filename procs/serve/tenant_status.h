// Tenant status: what `status` reports for a tenant, from its table row and the stages' counters
// while it has a row, and from <state>/tenants/<id>/status.json once it has settled (finished,
// stopped or failed). A settled tenant's row is reused by a later tenant when the service needs
// it, and a restarted service starts with an empty table: status.json is what keeps such a
// tenant in `status`. Pure functions; any thread.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "procs/serve/service.h"
#include "proto/marlaas.pb.h"

namespace marlaas::serve {

// The status of one tenant that has a table row.
pb::TenantStatus TenantStatusOf(const TenantView& v);

// Writes <tenant_dir>/status.json atomically (write, fsync, rename).
Status WriteSettledStatus(const std::string& tenant_dir, const pb::TenantStatus& status);

// The settled tenants of `state_dir` whose ids are not in `except` (those with rows), sorted by
// id. A tenant with a final state but no readable status.json (written by an older version, or
// torn by a crash of the machine) is reported with its state, reason and task, and the step,
// reward and adapter version of its last line of steps.jsonl; a status.json that is there but
// cannot be read is named in its reason.
std::vector<pb::TenantStatus> SettledTenantsOnDisk(const std::string& state_dir,
                                                   const std::set<std::string>& except);

}  // namespace marlaas::serve

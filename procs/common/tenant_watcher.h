// TenantWatcher: a stage's view of the tenant table. It re-reads the table's rows (serve writes
// them) and keeps each tenant's job spec, read once per tenant generation from the state dir.
// One thread per watcher.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/deadline.h"
#include "proto/marlaas.pb.h"
#include "shm/tenant_table.h"

namespace marlaas::pipeline {

struct WatchedTenant {
  int row = -1;
  TenantRecord record{};
  pb::JobSpec spec;
};

class TenantWatcher {
 public:
  TenantWatcher(const TenantTable* table, std::string state_dir, const char* role)
      : table_(table), state_dir_(std::move(state_dir)), role_(role) {}

  // Every non-free tenant whose job spec could be read, as of now. A tenant whose job file is
  // missing or invalid is skipped and logged once.
  const std::vector<WatchedTenant>& Poll();
  // The tenant with this id and generation from the last Poll, or null.
  const WatchedTenant* Find(const std::string& id, uint64_t generation) const;
  const std::vector<WatchedTenant>& tenants() const { return tenants_; }

 private:
  const TenantTable* table_;
  std::string state_dir_;
  const char* role_;
  std::vector<WatchedTenant> tenants_;
  std::map<std::pair<std::string, uint64_t>, pb::JobSpec> specs_;
  std::map<std::pair<std::string, uint64_t>, bool> failed_;
};

}  // namespace marlaas::pipeline

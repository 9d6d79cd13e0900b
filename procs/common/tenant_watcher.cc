#include "procs/common/tenant_watcher.h"

#include "procs/common/pipeline.h"

namespace marlaas::pipeline {

const std::vector<WatchedTenant>& TenantWatcher::Poll() {
  std::vector<WatchedTenant> now;
  for (auto& [row, rec] : table_->Snapshot()) {
    const auto key = std::make_pair(std::string(rec.id), rec.generation);
    auto it = specs_.find(key);
    if (it == specs_.end()) {
      if (failed_.count(key)) continue;
      auto spec = LoadTenantJob(state_dir_, rec.id);
      if (!spec.ok()) {
        StageLog(role_, "tenant %s: cannot read its job: %s", rec.id,
                 spec.status().ToString().c_str());
        failed_[key] = true;
        continue;
      }
      it = specs_.emplace(key, std::move(*spec)).first;
    }
    WatchedTenant t;
    t.row = row;
    t.record = rec;
    t.spec = it->second;
    now.push_back(std::move(t));
  }
  tenants_ = std::move(now);
  return tenants_;
}

const WatchedTenant* TenantWatcher::Find(const std::string& id, uint64_t generation) const {
  for (const WatchedTenant& t : tenants_)
    if (id == t.record.id && generation == t.record.generation) return &t;
  return nullptr;
}

}  // namespace marlaas::pipeline

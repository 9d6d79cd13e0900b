#include "shm/tenant_table.h"

#include <cstring>
#include <new>

namespace marlaas {
namespace {
const SegmentName TableName(const std::string& instance) { return {instance, "tenants"}; }
}  // namespace

const char* TenantStateName(TenantState s) {
  switch (s) {
    case TenantState::kFree:
      return "free";
    case TenantState::kAdmitted:
      return "admitted";
    case TenantState::kRunning:
      return "running";
    case TenantState::kStopping:
      return "stopping";
    case TenantState::kFinished:
      return "finished";
    case TenantState::kStopped:
      return "stopped";
    case TenantState::kFailed:
      return "failed";
  }
  return "unknown";
}

bool IsSettled(TenantState s) {
  return s == TenantState::kFinished || s == TenantState::kStopped || s == TenantState::kFailed;
}

Status CopyField(const std::string& value, char* field, size_t field_size, const char* name) {
  if (value.size() >= field_size) {
    return Status(StatusCode::kInvalidArgument, std::string(name) + " '" + value +
                                                    "' is longer than " +
                                                    std::to_string(field_size - 1) + " bytes");
  }
  std::memset(field, 0, field_size);
  std::memcpy(field, value.data(), value.size());
  return Status::Ok();
}

Result<TenantTable> TenantTable::Create(const std::string& instance) {
  MARLAAS_ASSIGN_OR_RETURN(
      Segment seg,
      Segment::Create(TableName(instance), SegmentKind::kTenantTable, kTenantTableLayoutVersion,
                      sizeof(TenantTableLayout), [](void* p, size_t) {
                        auto* layout = new (p) TenantTableLayout();
                        layout->capacity = kMaxTenants;
                        return Status::Ok();
                      }));
  return TenantTable(std::move(seg), true);
}

Result<TenantTable> TenantTable::Attach(const std::string& instance) {
  MARLAAS_ASSIGN_OR_RETURN(
      Segment seg,
      Segment::Attach(TableName(instance), SegmentKind::kTenantTable, kTenantTableLayoutVersion));
  return TenantTable(std::move(seg), false);
}

Status TenantTable::Put(int row, const TenantRecord& record) {
  if (!writer_) {
    return Status(StatusCode::kFailedPrecondition,
                  "tenant table is written only by the process that created it");
  }
  if (row < 0 || row >= kMaxTenants) {
    return Status(StatusCode::kInvalidArgument,
                  "tenant row " + std::to_string(row) + " out of range");
  }
  layout_->rows[row].Store(record);
  return Status::Ok();
}

Result<TenantRecord> TenantTable::Get(int row) const {
  if (row < 0 || row >= kMaxTenants) {
    return Status(StatusCode::kInvalidArgument,
                  "tenant row " + std::to_string(row) + " out of range");
  }
  TenantRecord r;
  if (!layout_->rows[row].Load(&r)) {
    return Status(StatusCode::kUnavailable,
                  "tenant row " + std::to_string(row) + " is being rewritten (or its writer died)");
  }
  return r;
}

Result<int> TenantTable::Find(const std::string& id) const {
  for (int row = 0; row < kMaxTenants; ++row) {
    TenantRecord r;
    if (layout_->rows[row].Load(&r) && r.state != TenantState::kFree &&
        std::strncmp(r.id, id.c_str(), sizeof(r.id)) == 0) {
      return row;
    }
  }
  return Status(StatusCode::kNotFound, "no tenant '" + id + "'");
}

Result<int> TenantTable::FreeRow() const {
  for (int row = 0; row < kMaxTenants; ++row) {
    TenantRecord r;
    if (layout_->rows[row].Load(&r) && r.state == TenantState::kFree) return row;
  }
  return Status(StatusCode::kResourceExhausted,
                "all " + std::to_string(kMaxTenants) + " tenant rows are in use");
}

std::vector<std::pair<int, TenantRecord>> TenantTable::Snapshot() const {
  std::vector<std::pair<int, TenantRecord>> out;
  for (int row = 0; row < kMaxTenants; ++row) {
    TenantRecord r;
    if (layout_->rows[row].Load(&r) && r.state != TenantState::kFree) out.emplace_back(row, r);
  }
  return out;
}

}  // namespace marlaas

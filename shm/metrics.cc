#include "shm/metrics.h"

#include <new>

namespace marlaas {
namespace {

SegmentName MetricsName(const std::string& instance, const std::string& role) {
  return {instance, "metrics." + role};
}

Status RowInRange(int row) {
  if (row < 0 || row >= kMaxTenants) {
    return Status(StatusCode::kInvalidArgument,
                  "tenant row " + std::to_string(row) + " out of range");
  }
  return Status::Ok();
}

}  // namespace

Result<MetricsSegment> MetricsSegment::Create(const std::string& instance,
                                              const std::string& role) {
  MARLAAS_ASSIGN_OR_RETURN(
      Segment seg,
      Segment::Create(MetricsName(instance, role), SegmentKind::kMetrics, kMetricsLayoutVersion,
                      sizeof(MetricsLayout), [](void* p, size_t) {
                        new (p) MetricsLayout();
                        return Status::Ok();
                      }));
  return MetricsSegment(std::move(seg));
}

Result<MetricsSegment> MetricsSegment::Attach(const std::string& instance,
                                              const std::string& role) {
  MARLAAS_ASSIGN_OR_RETURN(
      Segment seg,
      Segment::Attach(MetricsName(instance, role), SegmentKind::kMetrics, kMetricsLayoutVersion));
  return MetricsSegment(std::move(seg));
}

Status MetricsSegment::StoreTenant(int row, const TenantMetrics& m) {
  MARLAAS_RETURN_IF_ERROR(RowInRange(row));
  layout_->tenants[row].Store(m);
  return Status::Ok();
}

Result<EngineMetrics> MetricsSegment::LoadEngine() const {
  EngineMetrics m;
  if (!layout_->engine.Load(&m)) {
    return Status(StatusCode::kUnavailable,
                  "engine metrics are being rewritten (or the writer died)");
  }
  return m;
}

Result<TenantMetrics> MetricsSegment::LoadTenant(int row) const {
  MARLAAS_RETURN_IF_ERROR(RowInRange(row));
  TenantMetrics m;
  if (!layout_->tenants[row].Load(&m)) {
    return Status(StatusCode::kUnavailable, "tenant metrics row " + std::to_string(row) +
                                                " are being rewritten (or the writer died)");
  }
  return m;
}

}  // namespace marlaas

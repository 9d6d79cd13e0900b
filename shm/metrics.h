// Metrics segments: one per stage process ("metrics.<role>", e.g. metrics.rollout), created by
// serve (or a test), written only by that stage, read by serve, the CLI and benchmarks. Every
// block is a SeqlockCell, so readers get consistent snapshots without slowing the writer. A
// restarted stage attaches to the same segment and keeps counting from the values it reads.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "shm/segment.h"
#include "shm/seqlock.h"
#include "shm/tenant_table.h"

namespace marlaas {

inline constexpr uint32_t kMetricsLayoutVersion = 2;
inline constexpr int kStalenessBuckets = 8;  // staleness 0..6, and >= 7

struct EngineMetrics {
  int64_t started_mono_ns;  // when the current process began
  int64_t updated_mono_ns;  // last update
  uint64_t busy_ns;         // time spent computing (utilisation = busy / wall)
  uint64_t items;           // records/tokens handled, stage-defined
  uint64_t queue_depth;     // input waiting, stage-defined
  uint64_t restarts;        // how many times this stage was restarted
  uint64_t errors;
};

struct TenantMetrics {
  uint64_t generation;  // TenantRecord::generation these counters belong to
  uint64_t samples;
  uint64_t tokens;
  uint64_t steps;
  uint64_t adapter_version;
  uint64_t reward_count;
  double reward_sum;
  double reward_sq_sum;
  uint64_t verifier_errors;
  uint64_t staleness[kStalenessBuckets];
  // GRPO groups: rollout = committed to its ring; verifier = scored; trainer = trained.
  uint64_t groups;
  uint64_t groups_dropped;     // trainer: dropped with a logged reason (failed, stale, finished)
  uint64_t cursor;             // rollout: next prompt index; trainer: past the last trained prompt
  uint64_t groups_degenerate;  // trainer: trained groups whose rewards were all equal (no signal)
  double last_reward_mean;     // trainer: mean reward of the last step's groups
  char last_error[96];         // the latest problem of this tenant in this stage ("" when none)
};

struct MetricsLayout {
  SeqlockCell<EngineMetrics> engine;
  SeqlockCell<TenantMetrics> tenants[kMaxTenants];
};

class MetricsSegment {
 public:
  static Result<MetricsSegment> Create(const std::string& instance, const std::string& role);
  static Result<MetricsSegment> Attach(const std::string& instance, const std::string& role);

  // Writer (the stage named by `role`) only.
  void StoreEngine(const EngineMetrics& m) { layout_->engine.Store(m); }
  Status StoreTenant(int row, const TenantMetrics& m);

  Result<EngineMetrics> LoadEngine() const;
  Result<TenantMetrics> LoadTenant(int row) const;

 private:
  explicit MetricsSegment(Segment seg)
      : segment_(std::move(seg)), layout_(static_cast<MetricsLayout*>(segment_.payload())) {}
  Segment segment_;
  MetricsLayout* layout_;
};

}  // namespace marlaas

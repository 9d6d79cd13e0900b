// TenantTable: the service's list of tenants in shared memory (segment "tenants"). Written only
// by the process that created it (serve); every stage process reads it. Each row is a
// SeqlockCell, so a reader always gets a whole row, never a torn one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "shm/segment.h"
#include "shm/seqlock.h"

namespace marlaas {

inline constexpr uint32_t kTenantTableLayoutVersion = 3;
inline constexpr int kMaxTenants = 256;

enum class TenantState : uint32_t {
  kFree = 0,  // row unused
  kAdmitted,  // accepted, not yet running
  kRunning,
  kStopping,
  kFinished,  // reached max_steps
  kStopped,   // stopped by its owner
  kFailed,    // see `reason`
};
const char* TenantStateName(TenantState s);
// Finished, stopped or failed: nothing more happens to the tenant, and its row may be reused.
bool IsSettled(TenantState s);

struct TenantRecord {
  char id[64];
  char task[32];
  TenantState state;
  int32_t adapter_slot;  // AdapterStore slot, -1 if none
  uint32_t max_staleness;
  uint32_t group_size;
  uint32_t prompts_per_step;
  uint32_t max_steps;
  int64_t admitted_unix_ms;
  char reason[112];         // why it failed or stopped
  uint64_t generation;      // bumped each time the row is reused for a new tenant
  int64_t settled_unix_ms;  // when it became finished, stopped or failed (0: not yet)
};

struct TenantTableLayout {
  uint32_t capacity;
  SeqlockCell<TenantRecord> rows[kMaxTenants];
};

class TenantTable {
 public:
  // The writer (serve) creates the table; readers attach to it.
  static Result<TenantTable> Create(const std::string& instance);
  static Result<TenantTable> Attach(const std::string& instance);

  // Writer only. REQUIRES: 0 <= row < kMaxTenants.
  Status Put(int row, const TenantRecord& record);
  Result<TenantRecord> Get(int row) const;
  // The row holding tenant `id` in a non-free state, or kNotFound.
  Result<int> Find(const std::string& id) const;
  // The first free row, or kResourceExhausted.
  Result<int> FreeRow() const;
  // (row, record) for every non-free row.
  std::vector<std::pair<int, TenantRecord>> Snapshot() const;

 private:
  TenantTable(Segment seg, bool writer)
      : segment_(std::move(seg)),
        layout_(static_cast<TenantTableLayout*>(segment_.payload())),
        writer_(writer) {}

  Segment segment_;
  TenantTableLayout* layout_;
  bool writer_;
};

// Fills a fixed char field from a string; fails if it does not fit.
Status CopyField(const std::string& value, char* field, size_t field_size, const char* name);

}  // namespace marlaas

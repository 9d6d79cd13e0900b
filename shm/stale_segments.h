// Finding and removing the segments of dead service instances. A segment is stale when the
// process that created it has exited (or a recycled pid now stands in its place), or when it was
// never initialised and its creator is unknown. Called by `marlaas clean` and at service start.
#pragma once

#include <string>
#include <vector>

#include "base/process.h"
#include "base/status.h"

namespace marlaas {

struct SegmentInfo {
  std::string system_name;  // e.g. "marlaas.demo.traj"
  std::string instance;     // from the name
  uint64_t bytes = 0;
  bool initialised = false;  // magic published
  ProcessIdentity creator;
  bool creator_alive = false;
  bool stale() const;
};

// Every /dev/shm/marlaas.* segment, optionally only those of `instance` (empty = all).
Result<std::vector<SegmentInfo>> ListSegments(const std::string& instance = "");
// Unlinks the stale ones among ListSegments(instance); returns what it removed. Another user's
// that this one may not remove are left and skipped.
Result<std::vector<SegmentInfo>> RemoveStaleSegments(const std::string& instance = "");

}  // namespace marlaas

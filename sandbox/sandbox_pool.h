// Sandboxes prepared ahead of their runs (PreparedSandbox). With a pool of N, a background
// thread keeps N ready, so a run's set-up — namespaces, the cgroup join, mounts and pivot_root —
// is off its critical path; each is still used by one run only. Off unless set (the verifier
// stage sets one, --prepared-sandboxes): the set-up moves off the critical path but not off the
// CPU (bench_sandbox measures both ways).
// Thread-safe.
#pragma once

#include <optional>

#include "sandbox/prepared_sandbox.h"

namespace marlaas::sandbox {

// Keeps `n` sandboxes ready (0 stops refilling and drops the ready ones). The ones ready carry
// a per-run cgroup when the host has cgroup limits (HostCgroupSupport).
void SetPreparedSandboxPool(int n);

// A ready sandbox whose set-up succeeded, with a cgroup iff `cgroup`; none when the pool is off,
// empty or holds only the other kind (the caller then prepares its own).
std::optional<PreparedSandbox> TakePreparedSandbox(bool cgroup);

}  // namespace marlaas::sandbox

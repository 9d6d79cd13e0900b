// RunCgroup: one cgroup per sandbox run, so that a pids limit and a memory limit bound the run as
// a whole — every process it forks and the tmpfs pages it writes — where rlimits only bound each
// process (RLIMIT_AS) or each user (RLIMIT_NPROC).
//
// Where: cgroup v2 when the controllers `pids` and `memory` can be enabled below this process's
// own cgroup (a delegated subtree); otherwise the v1 `pids` and `memory` hierarchies when this
// process can create cgroups in them (each limit is applied where its controller is usable).
// Runs live at <hierarchy>/<own cgroup>/marlaas-sandbox/run-<pid>-<n>; run dirs whose creating
// process died are removed the first time a process probes; a process reuses its emptied run
// dirs (with the limits rewritten) and removes them at exit. HostCgroupSupport() says what
// this host allows and why not; without support the sandbox runs on rlimits alone.
//
// Protocol: Create() before fork; the sandbox helper (still privileged, before it execs or drops
// to nobody) writes "0" to each of join_files() — async-signal-safe opens and writes only — so
// that everything it forks starts inside; after the run, OomKilled() tells a memory-limit kill
// apart from other SIGKILLs, and the destructor kills leftovers and removes the dirs.
// Thread-safe: runs on different threads get different cgroups.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace marlaas::sandbox {

struct CgroupSupport {
  bool pids = false;    // per-run pids.max
  bool memory = false;  // per-run memory limit (swap included where the host accounts it)
  std::string version;  // "v2", "v1" or "" (none)
  std::string detail;   // where, or why not
};

// Probed once per process (creates and removes a test cgroup, and sweeps stale run dirs).
const CgroupSupport& HostCgroupSupport();

// Removes the run dirs of processes that died without removing them (e.g. after kill -9).
void RemoveStaleRunCgroups();

struct CgroupSet;  // a run's dirs, pooled (run_cgroup.cc)

class RunCgroup {
 public:
  // Creates this run's cgroup(s) with pids.max = max_pids and the memory limit. Fails when the
  // host has no support (HostCgroupSupport) or a write is refused.
  static Result<RunCgroup> Create(uint32_t max_pids, uint64_t memory_bytes);

  RunCgroup(RunCgroup&& other) noexcept;
  RunCgroup& operator=(RunCgroup&&) = delete;
  RunCgroup(const RunCgroup&) = delete;
  // Kills what is left inside; the emptied dirs are kept for the next run of this process
  // (creating memory cgroups is slow) and removed at exit.
  ~RunCgroup();

  // Rewrites the limits (a sandbox prepared ahead gets its request's limits at launch).
  Status SetLimits(uint32_t max_pids, uint64_t memory_bytes);
  // The cgroup.procs files the helper writes "0" to (one per hierarchy).
  const std::vector<std::string>& join_files() const;
  // The run's directories, one per hierarchy (for tests and logs).
  const std::vector<std::string>& dirs() const;
  // True when the kernel's OOM killer killed a process of this run (the memory limit).
  bool OomKilled() const;

 private:
  RunCgroup();
  std::unique_ptr<CgroupSet> set_;
  int64_t oom_baseline_ = 0;
};

}  // namespace marlaas::sandbox

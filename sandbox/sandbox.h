// RunSandboxed: runs one untrusted program in a child process with its own user, pid, network,
// mount, IPC and UTS namespaces; a fresh tmpfs root holding read-only binds of /usr (and the
// /bin, /lib, /lib64 links), a private proc, /dev with only null, zero and urandom, and a tmpfs
// work dir; no_new_privs; a seccomp deny-list (sandbox/seccomp_filter.h); rlimits; a wall-clock
// timeout that kills the whole pid namespace; capped stdout/stderr; and, where the host lets us
// create cgroups, a cgroup of its own bounding the run's processes and memory as a whole
// (sandbox/run_cgroup.h). Outside the namespaces the program runs as nobody when the caller is
// root. Each run gets a sandbox of its own (sandbox/prepared_sandbox.h), built at the call or
// ahead of it when a pool is set (sandbox/sandbox_pool.h). Thread-safe: calls on different
// threads run in parallel.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace marlaas::sandbox {

struct SandboxLimits {
  uint32_t wall_timeout_ms = 2000;
  uint32_t cpu_seconds = 2;
  // Address space of each process (RLIMIT_AS) and, with cgroup limits, the memory of the whole
  // run: every process's pages and what it writes to its tmpfs.
  uint64_t memory_bytes = 256ull << 20;
  uint32_t max_processes = 16;  // RLIMIT_NPROC and, with cgroup limits, the run's pids.max
  uint64_t max_file_bytes = 8ull << 20;
  uint32_t max_open_files = 64;
  uint64_t max_output_bytes = 64 << 10;   // each of stdout and stderr
  uint64_t work_dir_bytes = 16ull << 20;  // tmpfs size
  uint32_t work_dir_inodes = 1024;
  // Per-run cgroup (pids, memory) where HostCgroupSupport() has it; false: rlimits only.
  bool cgroup_limits = true;
};

struct SandboxRequest {
  std::vector<std::string>
      argv;  // argv[0]: absolute path inside the sandbox (e.g. /usr/bin/python3)
  std::string stdin_data;
  std::vector<std::pair<std::string, std::string>> files;  // written into /work before the run
  SandboxLimits limits;
  // The program runs as PID 1 of the run's pid namespace, its own init: signals that it sends
  // itself without a handler are dropped, kill(-1) spares it, and the orphans of its children are
  // its to reap. For a trusted harness that wants exactly that (python_tests_verifier.h). False:
  // it runs as PID 2 below the sandbox's init, which reaps and reports, and it behaves as on any
  // host (`kill -SEGV $$` ends it).
  bool as_pid1 = false;
};

enum class SandboxOutcome {
  kExited,       // exit_code says how
  kSignaled,     // killed by `signal` (SIGXCPU/SIGKILL after the CPU limit included)
  kTimeout,      // wall clock ran out; the whole process tree was killed
  kOutputLimit,  // stdout or stderr passed max_output_bytes; killed
  kMemoryLimit,  // the kernel killed a process of the run at the run's cgroup memory limit
  kSetupFailed,  // the sandbox could not be built: an infrastructure error, never a verdict
};
const char* SandboxOutcomeName(SandboxOutcome o);

struct SandboxResult {
  SandboxOutcome outcome = SandboxOutcome::kSetupFailed;
  int exit_code = -1;
  int signal = 0;
  std::string stdout_data, stderr_data;
  bool stdout_truncated = false, stderr_truncated = false;
  double wall_ms = 0;
  double setup_ms = 0;  // from the call until the program was about to exec (the isolation cost)
  // CPU time (user + system) of every process of the run and of its sandbox's helper, set-up
  // included: what the run cost the machine, where wall_ms also counts waiting for a core.
  double cpu_ms = 0;
  bool cgroup_limited = false;  // the run had its own cgroup limits
  bool prepared_ahead = false;  // its sandbox came from the pool (sandbox_pool.h)
  std::string setup_error;      // with kSetupFailed
};

// Killed by the CPU-time limit (SIGXCPU at the soft limit, SIGKILL at the hard one); any other
// signal is the program's own crash.
inline bool KilledByCpuLimit(const SandboxResult& r) {
  return r.outcome == SandboxOutcome::kSignaled && (r.signal == 24 /* SIGXCPU */ || r.signal == 9);
}

// Runs the request. A non-OK Status means the parent could not even start (pipes, fork).
Result<SandboxResult> RunSandboxed(const SandboxRequest& request);

// Removes the empty /tmp/marlaas-sandbox-* mount points that runs of killed processes left
// behind, when older than `min_age_s` (no run lives that long); returns how many went.
int RemoveStaleSandboxRoots(int min_age_s = 600);

}  // namespace marlaas::sandbox

// RunSandboxed: runs one untrusted program in a child process with its own user, pid, network,
// mount, IPC and UTS namespaces; a fresh tmpfs root holding read-only binds of /usr (and the
// /bin, /lib, /lib64 links), a private proc, /dev with only null, zero and urandom, and a tmpfs
// work dir; no_new_privs; a seccomp deny-list (sandbox/seccomp_filter.h); rlimits; a wall-clock
// timeout that kills the whole pid namespace; capped stdout/stderr. Outside the namespaces the
// program runs as nobody when the caller is root. Thread-compatible: each call forks its own
// processes; call from any one thread at a time per request.
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
  uint64_t memory_bytes = 256ull << 20;  // address space
  uint32_t max_processes = 16;
  uint64_t max_file_bytes = 8ull << 20;
  uint32_t max_open_files = 64;
  uint64_t max_output_bytes = 64 << 10;   // each of stdout and stderr
  uint64_t work_dir_bytes = 16ull << 20;  // tmpfs size
  uint32_t work_dir_inodes = 1024;
};

struct SandboxRequest {
  std::vector<std::string>
      argv;  // argv[0]: absolute path inside the sandbox (e.g. /usr/bin/python3)
  std::string stdin_data;
  std::vector<std::pair<std::string, std::string>> files;  // written into /work before the run
  SandboxLimits limits;
};

enum class SandboxOutcome {
  kExited,       // exit_code says how
  kSignaled,     // killed by `signal` (SIGXCPU/SIGKILL after the CPU limit included)
  kTimeout,      // wall clock ran out; the whole process tree was killed
  kOutputLimit,  // stdout or stderr passed max_output_bytes; killed
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
  std::string setup_error;  // with kSetupFailed
};

// Runs the request. A non-OK Status means the parent could not even start (pipes, fork).
Result<SandboxResult> RunSandboxed(const SandboxRequest& request);

}  // namespace marlaas::sandbox

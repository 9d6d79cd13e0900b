// PreparedSandbox: a sandbox built up to the point where only the request is missing. The helper
// process has joined the run's cgroup, dropped to nobody and entered new user, pid, network,
// mount, IPC, UTS and cgroup namespaces; its child, PID 1 of the pid namespace, in a session of
// its own, has pivoted into a fresh tmpfs root (read-only /usr binds, a private /proc that lists
// only the processes the program may trace (hidepid) with a read-only /proc/sys, /dev with null,
// zero and urandom, a tmpfs /work also seen as /tmp) and waits on a socket for the request.
// Launch() sends it; PID 1 then sizes /work and writes the files, and forks the program as PID 2
// while it stays as the run's init (unless the request has as_pid1: then it is the program). The
// program sets rlimits, gives up every capability (securebits: none at execve either), sets
// no_new_privs and the seccomp deny-list, and execs.
//
// Every run gets a sandbox of its own, prepared at the call or ahead of it (sandbox_pool.h):
// nothing of one run can reach another. An unused one dies with its creator: the helper has
// PDEATHSIG (bound to the creating thread, which must outlive it), and its PID 1 exits when the
// request socket reaches EOF.
//
// Status messages from the helper, the init and the program reach the parent on `status_r`
// (StatusMessage); RunSandboxed (sandbox.h) supervises the run. Move-only; not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "sandbox/run_cgroup.h"
#include "sandbox/sandbox.h"

namespace marlaas::sandbox {

// From the sandbox's helper and program to the parent, over the status pipe.
struct StatusMessage {
  enum Kind : int32_t {
    kProgramPid = 1,   // value: the run's PID 1 (as seen by the parent): the init or the program
    kWaitStatus = 2,   // value: a wait status: the first is the program's, unless the init
                       // was killed before it could report (then the init's, from the helper)
    kSetupError = 3,   // value: errno; text: what failed
    kAboutToExec = 4,  // the request was applied; execve follows
  };
  int32_t kind;
  int32_t value;
  char text[240];
};

class PreparedSandbox {
 public:
  // Builds one. With `cgroup`, the helper first joins a per-run cgroup (RunCgroup; its limits are
  // written at Launch). A failed step inside the sandbox is not an error here: it arrives as a
  // kSetupError message.
  static Result<PreparedSandbox> Prepare(bool cgroup);

  PreparedSandbox(PreparedSandbox&& other) noexcept;
  PreparedSandbox& operator=(PreparedSandbox&&) = delete;
  ~PreparedSandbox();  // kills what runs, closes the pipes, removes the mount point

  // Writes the run's cgroup limits and sends the request, giving up at `deadline` (ETIMEDOUT).
  // A sandbox that died during set-up fails here only when the parent cannot write: its
  // kSetupError is still on the status pipe.
  Status Launch(const SandboxRequest& request, std::chrono::steady_clock::time_point deadline);

  bool has_cgroup() const { return cgroup_.has_value(); }
  const RunCgroup* cgroup() const { return cgroup_ ? &*cgroup_ : nullptr; }
  pid_t helper() const { return helper_; }
  // False when the helper has already exited (the set-up failed; reaps it).
  bool SetUpAlive();
  // The parent's ends of the program's stdio and of the status pipe, handed to the caller, who
  // closes them.
  struct Streams {
    int stdin_w, stdout_r, stderr_r, status_r;
  };
  Streams TakeStreams();
  // Ends the run: kills its PID 1 (`pid1`, as kProgramPid gave it; <= 0 when unknown), which
  // makes the kernel kill every process of the namespace, and the helper, and reaps the helper.
  void Kill(pid_t pid1);
  // CPU time (user + system) of the helper and of every process of the run, which the program
  // and the kernel's end of the pid namespace reaped into it; known once the helper is reaped
  // (Kill, or SetUpAlive returning false), 0 before.
  int64_t cpu_ns() const { return cpu_ns_; }
  // When preparation began (set-up time = launch - this for a sandbox prepared at the call).
  std::chrono::steady_clock::time_point started() const { return started_; }

 private:
  PreparedSandbox() = default;
  pid_t helper_ = -1;
  // Reaps the helper (waitpid `options`), recording its process tree's CPU time; false when it
  // has not exited (WNOHANG) or cannot be waited for.
  bool ReapHelper(int options);
  int stdin_w_ = -1, stdout_r_ = -1, stderr_r_ = -1, status_r_ = -1, request_w_ = -1;
  int64_t cpu_ns_ = 0;
  std::string root_;
  std::optional<RunCgroup> cgroup_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace marlaas::sandbox

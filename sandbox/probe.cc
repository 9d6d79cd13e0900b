#include "sandbox/probe.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "sandbox/run_cgroup.h"
#include "sandbox/seccomp_filter.h"

namespace marlaas::sandbox {
namespace {

// Runs `attempt` in a forked child; returns "" when it succeeded, else its error text.
std::string TryInChild(const std::function<std::string()>& attempt) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return std::strerror(errno);
  const pid_t pid = ::fork();
  if (pid < 0) return std::strerror(errno);
  if (pid == 0) {
    ::close(pipefd[0]);
    const std::string err = attempt();
    (void)!::write(pipefd[1], err.data(), err.size());
    ::_exit(err.empty() ? 0 : 1);
  }
  ::close(pipefd[1]);
  char buf[256];
  const ssize_t n = ::read(pipefd[0], buf, sizeof(buf));
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return n > 0 ? std::string(buf, size_t(n)) : "the probe process died";
}

std::string Unshare(int flags) {
  if (::unshare(flags) != 0) return std::strerror(errno);
  return "";
}

}  // namespace

std::vector<IsolationLayer> ProbeIsolation() {
  std::vector<IsolationLayer> out;
  auto add = [&](const char* name, bool required, const std::function<std::string()>& attempt) {
    const std::string err = TryInChild(attempt);
    out.push_back({name, err.empty(), required, err});
  };
  add("user namespace", true, [] { return Unshare(CLONE_NEWUSER); });
  const int user = CLONE_NEWUSER;
  add("pid namespace", true, [&] { return Unshare(user | CLONE_NEWPID); });
  add("network namespace", true, [&] { return Unshare(user | CLONE_NEWNET); });
  add("mount namespace", true, [&] { return Unshare(user | CLONE_NEWNS); });
  add("ipc, uts and cgroup namespaces", true,
      [&] { return Unshare(user | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP); });
  add("no_new_privs", true, [] {
    return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 ? std::string() : std::strerror(errno);
  });
  add("seccomp-bpf", true, [] {
    ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    return InstallSeccompDenyList();
  });
  // Not required: without it rlimits still bound each process's memory and the processes of the
  // sandbox user, only not the run as a whole.
  const CgroupSupport& cg = HostCgroupSupport();
  out.push_back({"cgroup limits per run (pids, memory)", cg.pids && cg.memory, false, cg.detail});
  return out;
}

bool StrongIsolation(const std::vector<IsolationLayer>& layers) {
  for (const IsolationLayer& l : layers)
    if (l.required && !l.available) return false;
  return true;
}

IsolationPolicy DecideIsolationPolicy(const std::vector<IsolationLayer>& layers, bool allow_weak) {
  IsolationPolicy p;
  std::string missing;
  for (const IsolationLayer& l : layers)
    if (l.required && !l.available) missing += (missing.empty() ? "" : ", ") + l.name;
  if (missing.empty()) return p;
  if (allow_weak) {
    p.warning = "WARNING: --allow-weak-sandbox: running untrusted code WITHOUT " + missing +
                ". Do not use this with code you do not trust.";
  } else {
    p.refuse = "sandbox lacks " + missing +
               "; untrusted code refused (see `marlaas sandbox-check`; --allow-weak-sandbox "
               "overrides)";
  }
  return p;
}

}  // namespace marlaas::sandbox

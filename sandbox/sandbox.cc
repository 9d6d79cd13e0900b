#include "sandbox/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <optional>

#include "sandbox/prepared_sandbox.h"
#include "sandbox/run_cgroup.h"
#include "sandbox/sandbox_pool.h"

namespace marlaas::sandbox {
namespace {

void CloseAll(std::initializer_list<int> fds) {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
}

}  // namespace

const char* SandboxOutcomeName(SandboxOutcome o) {
  switch (o) {
    case SandboxOutcome::kExited:
      return "exited";
    case SandboxOutcome::kSignaled:
      return "signaled";
    case SandboxOutcome::kTimeout:
      return "timeout";
    case SandboxOutcome::kOutputLimit:
      return "output-limit";
    case SandboxOutcome::kMemoryLimit:
      return "memory-limit";
    case SandboxOutcome::kSetupFailed:
      return "setup-failed";
  }
  return "unknown";
}

int RemoveStaleSandboxRoots(int min_age_s) {
  DIR* d = ::opendir("/tmp");
  if (d == nullptr) return 0;
  int removed = 0;
  const time_t now = ::time(nullptr);
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, "marlaas-sandbox-", 16) != 0) continue;
    const std::string path = std::string("/tmp/") + e->d_name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || now - st.st_mtime < min_age_s)
      continue;
    removed += ::rmdir(path.c_str()) == 0;  // only empty dirs: a mount point seen from here
  }
  ::closedir(d);
  return removed;
}

Result<SandboxResult> RunSandboxed(const SandboxRequest& req) {
  if (req.argv.empty() || req.argv[0].empty() || req.argv[0][0] != '/') {
    return Status(StatusCode::kInvalidArgument, "sandbox argv[0] must be an absolute path");
  }
  uint64_t file_bytes = 0;
  for (const auto& [name, contents] : req.files) file_bytes += contents.size();
  if (file_bytes > req.limits.work_dir_bytes) {
    return Status(StatusCode::kInvalidArgument,
                  "the run's files are " + std::to_string(file_bytes) +
                      " bytes, more than its work dir holds (" +
                      std::to_string(req.limits.work_dir_bytes) + " bytes)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const bool cgroup =
      req.limits.cgroup_limits && (HostCgroupSupport().pids || HostCgroupSupport().memory);
  std::optional<PreparedSandbox> sandbox = TakePreparedSandbox(cgroup);
  const bool prepared_ahead = sandbox.has_value();
  if (!sandbox) {
    auto fresh = PreparedSandbox::Prepare(cgroup);
    if (!fresh.ok()) {
      if (fresh.status().message().rfind("cgroup: ", 0) != 0) return fresh.status();
      SandboxResult failed;  // a refused cgroup write is the sandbox's failure, not the caller's
      failed.setup_error = fresh.status().message();
      return failed;
    }
    sandbox.emplace(std::move(fresh).value());
  }
  const auto deadline = t0 + std::chrono::milliseconds(req.limits.wall_timeout_ms);
  const Status launched = sandbox->Launch(req, deadline);
  SandboxResult res;
  res.prepared_ahead = prepared_ahead;
  bool timed_out = false, over_output = false;
  if (!launched.ok()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;  // a large request to a slow sandbox used up the run's time
    } else {
      res.setup_error = launched.message();  // unless the sandbox says more
    }
  }
  const PreparedSandbox::Streams streams = sandbox->TakeStreams();  // closed here
  int out[2] = {streams.stdout_r, -1}, err[2] = {streams.stderr_r, -1};
  int st[2] = {streams.status_r, -1}, in[2] = {-1, streams.stdin_w};
  pid_t pid1 = -1;  // the run's PID 1, as the parent sees it
  bool have_status = false, exec_reached = false;
  int wstatus = 0;
  size_t stdin_written = 0;
  if (req.stdin_data.empty()) {
    ::close(in[1]);
    in[1] = -1;
  }
  int open_streams = 3;  // stdout, stderr, status
  while (open_streams > 0 && !timed_out) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      timed_out = true;
      break;
    }
    pollfd fds[4] = {
        {out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {st[0], POLLIN, 0}, {in[1], POLLOUT, 0}};
    const int wait_ms =
        int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    if (::poll(fds, in[1] >= 0 ? 4 : 3, wait_ms) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      std::string& sink = i == 0 ? res.stdout_data : res.stderr_data;
      bool& truncated = i == 0 ? res.stdout_truncated : res.stderr_truncated;
      if (n <= 0) {
        ::close(fds[i].fd);
        (i == 0 ? out[0] : err[0]) = -1;
        --open_streams;
        continue;
      }
      const size_t room =
          req.limits.max_output_bytes - std::min<size_t>(sink.size(), req.limits.max_output_bytes);
      sink.append(buf, std::min<size_t>(room, size_t(n)));
      if (size_t(n) > room) {
        truncated = true;
        over_output = true;
      }
    }
    if (over_output) break;
    if (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) {
      StatusMessage m;
      const ssize_t n = ::read(st[0], &m, sizeof(m));
      if (n != sizeof(m)) {
        ::close(st[0]);
        st[0] = -1;
        --open_streams;
      } else if (m.kind == StatusMessage::kProgramPid) {
        pid1 = m.value;
      } else if (m.kind == StatusMessage::kWaitStatus) {
        // The first is the program's (from the init, or from the helper when the program is
        // PID 1); the helper's report of a reaped init follows it.
        if (!have_status) wstatus = m.value;
        have_status = true;
      } else if (m.kind == StatusMessage::kSetupError) {
        res.setup_error = m.text;
      } else if (m.kind == StatusMessage::kAboutToExec) {
        exec_reached = true;
        res.setup_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
      }
    }
    if (in[1] >= 0 && (fds[3].revents & (POLLOUT | POLLERR | POLLHUP))) {
      // A socket: a program that exits without reading gives EPIPE here, never SIGPIPE.
      const ssize_t n = ::send(in[1], req.stdin_data.data() + stdin_written,
                               req.stdin_data.size() - stdin_written, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n > 0) stdin_written += size_t(n);
      if (n < 0 || stdin_written == req.stdin_data.size()) {
        ::close(in[1]);
        in[1] = -1;
      }
    }
  }
  // What the helper said but the loop did not read (it stopped at the deadline or the output
  // limit): the run's PID 1, or that the program was already reaped.
  for (StatusMessage m; st[0] >= 0 && !have_status;) {
    pollfd p{st[0], POLLIN, 0};
    if (::poll(&p, 1, 0) != 1 || ::read(st[0], &m, sizeof(m)) != ssize_t(sizeof(m))) break;
    if (m.kind == StatusMessage::kProgramPid) pid1 = m.value;
    if (m.kind == StatusMessage::kWaitStatus) have_status = true, wstatus = m.value;
    if (m.kind == StatusMessage::kAboutToExec) exec_reached = true;
    if (m.kind == StatusMessage::kSetupError) res.setup_error = m.text;
  }
  // Killing the run's PID 1 makes the kernel kill every process in its namespace; once the
  // program's wait status arrived, PID 1 has exited (or is the program) and its pid may already
  // belong to someone else.
  sandbox->Kill(have_status ? -1 : pid1);
  res.cpu_ms = double(sandbox->cpu_ns()) * 1e-6;
  CloseAll({in[1], out[0], err[0], st[0]});
  const RunCgroup* cg = sandbox->cgroup();
  res.cgroup_limited = cg != nullptr;
  res.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!res.setup_error.empty()) {
    res.outcome = SandboxOutcome::kSetupFailed;
  } else if (have_status && !exec_reached && !timed_out) {
    // Died between fork and execve: our set-up failed, not the program.
    res.outcome = SandboxOutcome::kSetupFailed;
    res.setup_error = "the sandbox died before execve (" +
                      (WIFSIGNALED(wstatus) ? "signal " + std::to_string(WTERMSIG(wstatus))
                                            : "exit " + std::to_string(WEXITSTATUS(wstatus))) +
                      ")";
  } else if (over_output) {
    res.outcome = SandboxOutcome::kOutputLimit;
  } else if (!timed_out && cg != nullptr && cg->OomKilled()) {
    res.outcome = SandboxOutcome::kMemoryLimit;
    if (have_status && WIFSIGNALED(wstatus)) res.signal = WTERMSIG(wstatus);
    if (have_status && WIFEXITED(wstatus)) res.exit_code = WEXITSTATUS(wstatus);
  } else if (timed_out || !have_status) {
    res.outcome = timed_out ? SandboxOutcome::kTimeout : SandboxOutcome::kSetupFailed;
    if (!timed_out)
      res.setup_error = "the sandbox helper exited without reporting the program's status";
  } else if (WIFEXITED(wstatus)) {
    res.outcome = SandboxOutcome::kExited;
    res.exit_code = WEXITSTATUS(wstatus);
  } else {
    res.outcome = SandboxOutcome::kSignaled;
    res.signal = WTERMSIG(wstatus);
  }
  return res;
}

}  // namespace marlaas::sandbox

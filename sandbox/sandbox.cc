#include "sandbox/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "sandbox/run_cgroup.h"
#include "sandbox/seccomp_filter.h"

namespace marlaas::sandbox {
namespace {

constexpr uid_t kNobody = 65534;

// Messages from the sandbox's helper process to the parent, over the status pipe.
struct StatusMessage {
  int32_t kind;  // 1: inner pid, 2: wait status of the program, 3: setup error, 4: about to exec
  int32_t value;
  char text[240];
};

void Send(int fd, int32_t kind, int32_t value, const char* text = "") {
  StatusMessage m{};
  m.kind = kind;
  m.value = value;
  std::strncpy(m.text, text, sizeof(m.text) - 1);
  (void)!::write(fd, &m, sizeof(m));
}

// In the child: report a setup failure and exit. Only async-signal-safe calls.
[[noreturn]] void Fail(int status_fd, const char* what) {
  char text[240];
  std::snprintf(text, sizeof(text), "%s: %s", what, std::strerror(errno));
  Send(status_fd, 3, errno, text);
  ::_exit(127);
}

bool WriteFile(const char* path, const char* text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::write(fd, text, std::strlen(text));
  ::close(fd);
  return n == ssize_t(std::strlen(text));
}

// Replicates the host path `name` (e.g. "bin") in the new root: a symlink stays a symlink, a
// directory becomes a read-only bind.
bool MirrorReadOnly(const std::string& root, const char* name) {
  const std::string host = std::string("/") + name, inside = root + "/" + name;
  struct stat st {};
  if (::lstat(host.c_str(), &st) != 0) return true;  // absent on this host: nothing to mirror
  if (S_ISLNK(st.st_mode)) {
    char target[256];
    const ssize_t n = ::readlink(host.c_str(), target, sizeof(target) - 1);
    if (n < 0) return false;
    target[n] = '\0';
    return ::symlink(target, inside.c_str()) == 0;
  }
  if (::mkdir(inside.c_str(), 0755) != 0) return false;
  if (::mount(host.c_str(), inside.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) return false;
  return ::mount(nullptr, inside.c_str(), nullptr,
                 MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0;
}

// The program's process: PID 1 of the new pid namespace. Builds the root, drops what it can,
// and execs. Never returns.
[[noreturn]] void RunProgram(const SandboxRequest& req, const std::string& root, int status_fd,
                             int in_fd, int out_fd, int err_fd) {
  const SandboxLimits& L = req.limits;
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    Fail(status_fd, "make / private");
  if (::mount("sandbox", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") != 0) {
    Fail(status_fd, "mount root tmpfs");
  }
  for (const char* name : {"usr", "bin", "lib", "lib64", "sbin"}) {
    if (!MirrorReadOnly(root, name)) Fail(status_fd, name);
  }
  for (const char* dir : {"/proc", "/dev", "/work", "/tmp", "/.old"}) {
    if (::mkdir((root + dir).c_str(), 0755) != 0) Fail(status_fd, dir);
  }
  if (::mount("proc", (root + "/proc").c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              nullptr) != 0) {
    Fail(status_fd, "mount proc");
  }
  for (const char* dev : {"null", "zero", "urandom"}) {
    const std::string inside = root + "/dev/" + dev, host = std::string("/dev/") + dev;
    int fd = ::open(inside.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) Fail(status_fd, "create /dev node");
    ::close(fd);
    if (::mount(host.c_str(), inside.c_str(), nullptr, MS_BIND, nullptr) != 0)
      Fail(status_fd, "bind /dev node");
  }
  char opts[96];
  std::snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%u,mode=0777",
                (unsigned long long)L.work_dir_bytes, L.work_dir_inodes);
  if (::mount("work", (root + "/work").c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
    Fail(status_fd, "mount /work");
  }
  if (::mount((root + "/work").c_str(), (root + "/tmp").c_str(), nullptr, MS_BIND, nullptr) != 0) {
    Fail(status_fd, "bind /tmp");
  }
  for (const auto& [name, contents] : req.files) {
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
      errno = EINVAL;
      Fail(status_fd, "file names must be plain names");
    }
    int fd =
        ::open((root + "/work/" + name).c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::write(fd, contents.data(), contents.size()) != ssize_t(contents.size())) {
      Fail(status_fd, "write work file");
    }
    ::close(fd);
  }
  if (::syscall(SYS_pivot_root, root.c_str(), (root + "/.old").c_str()) != 0)
    Fail(status_fd, "pivot_root");
  if (::chdir("/") != 0 || ::umount2("/.old", MNT_DETACH) != 0 || ::rmdir("/.old") != 0) {
    Fail(status_fd, "detach the old root");
  }
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0) {
    Fail(status_fd, "remount / read-only");
  }
  (void)::sethostname("sandbox", 7);
  if (::chdir("/work") != 0) Fail(status_fd, "chdir /work");

  const struct {
    int resource;
    rlim_t value;
  } limits[] = {{RLIMIT_CPU, L.cpu_seconds},       {RLIMIT_AS, L.memory_bytes},
                {RLIMIT_NPROC, L.max_processes},   {RLIMIT_FSIZE, L.max_file_bytes},
                {RLIMIT_NOFILE, L.max_open_files}, {RLIMIT_CORE, 0}};
  for (const auto& l : limits) {
    struct rlimit r {
      l.value, l.value
    };
    if (::setrlimit(l.resource, &r) != 0) Fail(status_fd, "setrlimit");
  }
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0)
    Fail(status_fd, "dup2");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail(status_fd, "no_new_privs");
  const std::string seccomp_error = InstallSeccompDenyList();
  if (!seccomp_error.empty()) {
    errno = EPERM;
    Fail(status_fd, seccomp_error.c_str());
  }
  std::vector<char*> argv;
  for (const std::string& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  char env_path[] = "PATH=/usr/bin:/bin", env_home[] = "HOME=/work", env_lang[] = "LANG=C.UTF-8";
  char* envp[] = {env_path, env_home, env_lang, nullptr};
  Send(status_fd, 4, 0);  // the pipe is close-on-exec: nothing else can reach the parent
  ::execve(argv[0], argv.data(), envp);
  Fail(status_fd, "execve");
}

// The helper between the parent and the program: joins the run's cgroup, drops to nobody,
// enters the new namespaces, forks the program as their PID 1, reports its pid and, later, its
// wait status.
[[noreturn]] void RunHelper(const SandboxRequest& req, const std::string& root,
                            const std::vector<std::string>& cgroup_join_files, int status_fd,
                            int in_fd, int out_fd, int err_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (const std::string& procs : cgroup_join_files) {  // "0": the writing process
    const int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) Fail(status_fd, "join the run's cgroup");
    ::close(fd);
  }
  if (::getuid() == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) {
      Fail(status_fd, "drop to nobody");
    }
    // Changing uid cleared the dumpable flag, which makes /proc/self root-owned; we need to
    // write our own uid_map below.
    ::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  }
  const uid_t outer_uid = ::getuid();
  const gid_t outer_gid = ::getgid();
  // The cgroup namespace, entered after joining the run's cgroup, shows that cgroup as "/".
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                CLONE_NEWUTS | CLONE_NEWCGROUP) != 0) {
    Fail(status_fd, "unshare namespaces");
  }
  char map[64];
  std::snprintf(map, sizeof(map), "0 %u 1", outer_uid);
  if (!WriteFile("/proc/self/setgroups", "deny") || !WriteFile("/proc/self/uid_map", map)) {
    Fail(status_fd, "write uid_map");
  }
  std::snprintf(map, sizeof(map), "0 %u 1", outer_gid);
  if (!WriteFile("/proc/self/gid_map", map)) Fail(status_fd, "write gid_map");
  const pid_t program = ::fork();
  if (program < 0) Fail(status_fd, "fork the program");
  if (program == 0) RunProgram(req, root, status_fd, in_fd, out_fd, err_fd);
  Send(status_fd, 1, program);
  ::close(in_fd);
  ::close(out_fd);
  ::close(err_fd);
  int wstatus = 0;
  while (::waitpid(program, &wstatus, 0) < 0 && errno == EINTR) {
  }
  Send(status_fd, 2, wstatus);
  ::_exit(0);
}

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
  const auto t0 = std::chrono::steady_clock::now();
  char root_template[] = "/tmp/marlaas-sandbox-XXXXXX";
  if (::mkdtemp(root_template) == nullptr) return ErrnoStatus("mkdtemp", errno);
  const std::string root = root_template;
  ::chmod(root.c_str(), 0755);  // the helper runs as nobody and must reach its mount point
  std::optional<RunCgroup> cgroup;
  std::vector<std::string> join_files;
  if (req.limits.cgroup_limits && (HostCgroupSupport().pids || HostCgroupSupport().memory)) {
    // +1: the helper joins the cgroup too.
    auto cg = RunCgroup::Create(req.limits.max_processes + 1, req.limits.memory_bytes);
    if (!cg.ok()) {
      ::rmdir(root.c_str());
      SandboxResult failed;
      failed.setup_error = "cgroup: " + cg.status().message();
      return failed;
    }
    cgroup.emplace(std::move(cg).value());
    join_files = cgroup->join_files();
  }
  int in[2], out[2], err[2], st[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(st, O_CLOEXEC) != 0) {
    ::rmdir(root.c_str());
    return ErrnoStatus("pipe2", errno);
  }
  const pid_t helper = ::fork();
  if (helper < 0) {
    CloseAll({in[0], in[1], out[0], out[1], err[0], err[1], st[0], st[1]});
    ::rmdir(root.c_str());
    return ErrnoStatus("fork", errno);
  }
  if (helper == 0) {
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    ::close(st[0]);
    RunHelper(req, root, join_files, st[1], in[0], out[1], err[1]);
  }
  CloseAll({in[0], out[1], err[1], st[1]});
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);

  SandboxResult res;
  pid_t program = -1;
  bool have_status = false;
  int wstatus = 0;
  size_t stdin_written = 0;
  if (req.stdin_data.empty()) {
    ::close(in[1]);
    in[1] = -1;
  }
  const auto deadline = t0 + std::chrono::milliseconds(req.limits.wall_timeout_ms);
  bool timed_out = false, over_output = false;
  int open_streams = 3;  // stdout, stderr, status
  while (open_streams > 0) {
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
      } else if (m.kind == 1) {
        program = m.value;
      } else if (m.kind == 2) {
        have_status = true;
        wstatus = m.value;
      } else if (m.kind == 3) {
        res.setup_error = m.text;
      } else if (m.kind == 4) {
        res.setup_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
      }
    }
    if (in[1] >= 0 && (fds[3].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t n = ::write(in[1], req.stdin_data.data() + stdin_written,
                                req.stdin_data.size() - stdin_written);
      if (n > 0) stdin_written += size_t(n);
      if (n < 0 || stdin_written == req.stdin_data.size()) {
        ::close(in[1]);
        in[1] = -1;
      }
    }
  }
  // Killing the program, PID 1 of its namespace, makes the kernel kill every process in it.
  if (program > 0) ::kill(program, SIGKILL);
  ::kill(helper, SIGKILL);
  while (::waitpid(helper, nullptr, 0) < 0 && errno == EINTR) {
  }
  CloseAll({in[1], out[0], err[0], st[0]});
  ::rmdir(root.c_str());
  res.cgroup_limited = cgroup.has_value();
  res.wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!res.setup_error.empty()) {
    res.outcome = SandboxOutcome::kSetupFailed;
  } else if (over_output) {
    res.outcome = SandboxOutcome::kOutputLimit;
  } else if (!timed_out && cgroup && cgroup->OomKilled()) {
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

#include "sandbox/prepared_sandbox.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <type_traits>
#include <vector>

#include "sandbox/seccomp_filter.h"

namespace marlaas::sandbox {
namespace {

constexpr uid_t kNobody = 65534;
constexpr uint32_t kRequestMagic = 0x4d53424f;  // "MSBO"

void Send(int fd, int32_t kind, int32_t value, const char* text = "") {
  StatusMessage m{};
  m.kind = kind;
  m.value = value;
  std::strncpy(m.text, text, sizeof(m.text) - 1);
  (void)!::write(fd, &m, sizeof(m));
}

// In the child: report a setup failure and exit.
[[noreturn]] void Fail(int status_fd, const char* what) {
  char text[240];
  std::snprintf(text, sizeof(text), "%s: %s", what, std::strerror(errno));
  Send(status_fd, StatusMessage::kSetupError, errno, text);
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

// Closes every descriptor from 3 up except `keep`.
void CloseAllExcept(std::initializer_list<int> keep) {
  std::vector<int> k(keep);
  std::sort(k.begin(), k.end());
  unsigned first = 3;
  for (int fd : k) {
    if (fd < int(first)) continue;
    if (unsigned(fd) > first) ::syscall(SYS_close_range, first, unsigned(fd) - 1, 0);
    first = unsigned(fd) + 1;
  }
  ::syscall(SYS_close_range, first, ~0u, 0);
}

// The request on the wire: magic, SandboxLimits as bytes, argv, files (u64 lengths).
static_assert(std::is_trivially_copyable<SandboxLimits>::value, "SandboxLimits is sent as bytes");

void PutBytes(std::string* out, const void* p, size_t n) {
  out->append(static_cast<const char*>(p), n);
}
void PutString(std::string* out, const std::string& s) {
  const uint64_t n = s.size();
  PutBytes(out, &n, sizeof(n));
  out->append(s);
}

std::string EncodeRequest(const SandboxRequest& req) {
  std::string out;
  PutBytes(&out, &kRequestMagic, sizeof(kRequestMagic));
  PutBytes(&out, &req.limits, sizeof(req.limits));
  const uint8_t as_pid1 = req.as_pid1;
  PutBytes(&out, &as_pid1, sizeof(as_pid1));
  const uint64_t argc = req.argv.size(), files = req.files.size();
  PutBytes(&out, &argc, sizeof(argc));
  for (const std::string& a : req.argv) PutString(&out, a);
  PutBytes(&out, &files, sizeof(files));
  for (const auto& [name, contents] : req.files) {
    PutString(&out, name);
    PutString(&out, contents);
  }
  return out;
}

bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

bool ReadString(int fd, std::string* s) {
  uint64_t n = 0;
  if (!ReadAll(fd, &n, sizeof(n)) || n > (1ull << 30)) return false;
  s->resize(n);
  return ReadAll(fd, s->data(), n);
}

// Reads the request; false on EOF (the creator is gone or dropped us) or a malformed one.
bool DecodeRequest(int fd, SandboxRequest* req) {
  uint32_t magic = 0;
  uint64_t argc = 0, files = 0;
  uint8_t as_pid1 = 0;
  if (!ReadAll(fd, &magic, sizeof(magic)) || magic != kRequestMagic ||
      !ReadAll(fd, &req->limits, sizeof(req->limits)) || !ReadAll(fd, &as_pid1, sizeof(as_pid1)) ||
      !ReadAll(fd, &argc, sizeof(argc)) || argc == 0 || argc > 4096) {
    return false;
  }
  req->as_pid1 = as_pid1 != 0;
  req->argv.resize(argc);
  for (std::string& a : req->argv)
    if (!ReadString(fd, &a)) return false;
  if (!ReadAll(fd, &files, sizeof(files)) || files > 4096) return false;
  req->files.resize(files);
  for (auto& [name, contents] : req->files)
    if (!ReadString(fd, &name) || !ReadString(fd, &contents)) return false;
  return true;
}

// PID 1 of the run's pid namespace once the request arrived: reaps every process that ends up
// its child (the program and the orphans it leaves), reports the program's wait status, and exits,
// which makes the kernel kill whatever is left in the namespace. Nothing else: no
// allocation, no exec; it keeps its capabilities in the run's user namespace, so the program
// (which has none) can neither trace it nor, with hidepid, see it in /proc.
[[noreturn]] void RunInit(pid_t program, int status_fd, int in_fd, int out_fd, int err_fd) {
  for (int fd : {in_fd, out_fd, err_fd}) ::close(fd);  // the parent's EOFs are the program's
  // The handlers of the process the sandbox was forked from (a stage's SIGTERM handler) would
  // run here at the program's kill(1, ...): with none, the kernel drops what the namespace sends.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) (void)::sigaction(sig, &dfl, nullptr);
  for (;;) {
    int wstatus = 0;
    const pid_t reaped = ::waitpid(-1, &wstatus, 0);
    if (reaped == program) {
      Send(status_fd, StatusMessage::kWaitStatus, wstatus);
      ::_exit(0);
    }
    if (reaped < 0 && errno != EINTR) ::_exit(126);  // ECHILD: cannot happen before the program
  }
}

// The run's first process in the new pid namespace (its PID 1). Builds the root, waits for the
// request and writes its files, then forks: it stays as the run's init (RunInit) and the child,
// PID 2, applies the rest of the request, drops what it can, and execs the program. A program
// that were PID 1 itself would be immune to every signal it sent itself without a handler (`kill
// -SEGV $$` would do nothing; abort() would end by another signal) and would leave the orphans
// of its children unreaped; only a request with as_pid1 gets that. Never returns.
[[noreturn]] void RunProgram(const std::string& root, int status_fd, int request_fd, int in_fd,
                             int out_fd, int err_fd) {
  // Dies with the helper (and, as PID 1 of its namespace, takes every process of the run along):
  // a run whose helper was killed before its pid reached the parent cannot outlive it. (getppid
  // cannot close the fork-to-prctl window here: the helper is outside this pid namespace.)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // A session of its own, hence a scheduler autogroup of its own: through /proc/self/autogroup a
  // program could otherwise renice every process of the session it was started in (the
  // verifier's, with the service's stages).
  if (::setsid() < 0) Fail(status_fd, "setsid");
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
  // hidepid: a process the program may not trace (the init) is not listed at all.
  if (::mount("proc", (root + "/proc").c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "hidepid=2") != 0) {
    Fail(status_fd, "mount proc");
  }
  // The namespaces' own sysctls are owned by their root, which the program is: read-only.
  const std::string sys = root + "/proc/sys";
  if (::mount(sys.c_str(), sys.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
      ::mount(nullptr, sys.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
    Fail(status_fd, "make /proc/sys read-only");
  }
  for (const char* dev : {"null", "zero", "urandom"}) {
    const std::string inside = root + "/dev/" + dev, host = std::string("/dev/") + dev;
    int fd = ::open(inside.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0666);
    if (fd < 0) Fail(status_fd, "create /dev node");
    ::close(fd);
    if (::mount(host.c_str(), inside.c_str(), nullptr, MS_BIND, nullptr) != 0)
      Fail(status_fd, "bind /dev node");
  }
  // Sized at the default here; resized to the request's limits below.
  if (::mount("work", (root + "/work").c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              "size=16m,nr_inodes=1024,mode=0777") != 0) {
    Fail(status_fd, "mount /work");
  }
  if (::mount((root + "/work").c_str(), (root + "/tmp").c_str(), nullptr, MS_BIND, nullptr) != 0) {
    Fail(status_fd, "bind /tmp");
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

  // Ready: everything above is the same for every run. Now the request.
  SandboxRequest req;
  if (!DecodeRequest(request_fd, &req)) ::_exit(0);  // dropped unused, or the creator died
  ::close(request_fd);
  const SandboxLimits& L = req.limits;
  char opts[96];
  std::snprintf(opts, sizeof(opts), "size=%llu,nr_inodes=%u,mode=0777",
                (unsigned long long)L.work_dir_bytes, L.work_dir_inodes);
  if (::mount(nullptr, "/work", nullptr, MS_REMOUNT | MS_NOSUID | MS_NODEV, opts) != 0) {
    Fail(status_fd, "size /work");
  }
  for (const auto& [name, contents] : req.files) {
    if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
      errno = EINVAL;
      Fail(status_fd, "file names must be plain names");
    }
    int fd = ::open(("/work/" + name).c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || ::write(fd, contents.data(), contents.size()) != ssize_t(contents.size())) {
      Fail(status_fd, "write work file");
    }
    ::close(fd);
  }
  std::vector<char*> argv;
  for (const std::string& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const SeccompProgram& seccomp = DenyListProgram();  // compiled before the first fork
  if (!req.as_pid1) {
    // Not traceable from the first instant (the program's execve makes it dumpable again).
    ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    const pid_t program = ::fork();
    if (program < 0) Fail(status_fd, "fork the program");
    if (program > 0) {
      // The request's files, decoded on this heap (charged to the run's cgroup, like their copy
      // in /work), would stay for the whole run: freed (this process has no RLIMIT_AS).
      { const SandboxRequest spent = std::move(req); }
      RunInit(program, status_fd, in_fd, out_fd, err_fd);
    }
  }
  // From here on nothing may allocate: RLIMIT_AS counts the address space this process inherited
  // (gigabytes in a LibTorch process), so a small limit fails every malloc until execve.
  const rlim_t nproc = L.max_processes + (req.as_pid1 ? 0 : 1);  // the init is the same user
  const struct {
    int resource;
    rlim_t value;
  } limits[] = {
      {RLIMIT_CPU, L.cpu_seconds},      {RLIMIT_AS, L.memory_bytes},       {RLIMIT_NPROC, nproc},
      {RLIMIT_FSIZE, L.max_file_bytes}, {RLIMIT_NOFILE, L.max_open_files}, {RLIMIT_CORE, 0}};
  for (const auto& l : limits) {
    // Never above the hard limit this process was given (serve run under `prlimit`, a
    // container's): raising it is not allowed, and every run failed with "setrlimit: Operation
    // not permitted", blamed on the tenants. The lower limit is the stricter one.
    struct rlimit given {};
    rlim_t value = l.value;
    if (::getrlimit(l.resource, &given) == 0 && given.rlim_max != RLIM_INFINITY &&
        (value == RLIM_INFINITY || value > given.rlim_max))
      value = given.rlim_max;
    struct rlimit r {
      value, value
    };
    if (::setrlimit(l.resource, &r) != 0) Fail(status_fd, "setrlimit");
  }
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0)
    Fail(status_fd, "dup2");
  // No capabilities, not even inside the namespaces (as their uid 0 the program would get all of
  // them at execve): everything in the sandbox is one ordinary user, who cannot raise a limit,
  // mount, or read or write a non-dumpable process (python_tests_verifier.h relies on it).
  if (::prctl(PR_SET_SECUREBITS,
              SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                  SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                  SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
              0, 0, 0) != 0) {
    Fail(status_fd, "securebits");
  }
  for (int cap = 0; cap < 64; ++cap) {
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      Fail(status_fd, "drop the capability bounding set");
    }
  }
  // An ignored SIGPIPE would pass through execve to the program (`yes | head -1` would then
  // print "Broken pipe" and run on instead of ending quietly): the default, whatever our host
  // process does with it. SIGHUP too (serve ignores hangups).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  if (::sigaction(SIGPIPE, &dfl, nullptr) != 0) Fail(status_fd, "reset SIGPIPE");
  if (::sigaction(SIGHUP, &dfl, nullptr) != 0) Fail(status_fd, "reset SIGHUP");
  // Nor may a signal the creating thread blocked stay blocked in the program.
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) Fail(status_fd, "unblock signals");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) Fail(status_fd, "no_new_privs");
  if (!seccomp.error.empty()) {
    errno = EPERM;
    Fail(status_fd, seccomp.error.c_str());
  }
  if (const int e = InstallSeccompProgram(seccomp); e != 0) {
    errno = e;
    Fail(status_fd, "install the seccomp filter");
  }
  char env_path[] = "PATH=/usr/bin:/bin", env_home[] = "HOME=/work", env_lang[] = "LANG=C.UTF-8";
  char* envp[] = {env_path, env_home, env_lang, nullptr};
  // The status pipe is close-on-exec: after this, nothing of ours reaches the parent.
  Send(status_fd, StatusMessage::kAboutToExec, 0);
  ::execve(argv[0], argv.data(), envp);
  Fail(status_fd, "execve");
}

// The helper between the parent and the run: joins the run's cgroup, drops to nobody, enters the
// new namespaces, forks their PID 1 (RunProgram, later the run's init), reports its pid and,
// once reaped, its wait status (after the init's report of the program's, which the parent
// takes: the helper's tells of an init killed before it could report).
[[noreturn]] void RunHelper(const std::string& root, const std::vector<std::string>& join_files,
                            int status_fd, int request_fd, int in_fd, int out_fd, int err_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Other threads' sandboxes' pipes, inherited through fork, would keep their ends open (their
  // EOF late) for as long as this sandbox lives: keep only ours.
  CloseAllExcept({status_fd, request_fd, in_fd, out_fd, err_fd});
  for (const std::string& procs : join_files) {  // "0": the writing process
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
  if (program == 0) RunProgram(root, status_fd, request_fd, in_fd, out_fd, err_fd);
  Send(status_fd, StatusMessage::kProgramPid, program);
  for (int fd : {request_fd, in_fd, out_fd, err_fd}) ::close(fd);
  int wstatus = 0;
  while (::waitpid(program, &wstatus, 0) < 0 && errno == EINTR) {
  }
  Send(status_fd, StatusMessage::kWaitStatus, wstatus);
  ::_exit(0);
}

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

}  // namespace

Result<PreparedSandbox> PreparedSandbox::Prepare(bool cgroup) {
  PreparedSandbox s;
  s.started_ = std::chrono::steady_clock::now();
  char root_template[] = "/tmp/marlaas-sandbox-XXXXXX";
  if (::mkdtemp(root_template) == nullptr) return ErrnoStatus("mkdtemp", errno);
  s.root_ = root_template;
  ::chmod(s.root_.c_str(), 0755);  // the helper runs as nobody and must reach its mount point
  (void)DenyListProgram();  // compiled here, so the child only installs it (no allocation there)
  std::vector<std::string> join_files;
  if (cgroup) {
    const SandboxLimits defaults;  // Launch writes the request's
    auto cg = RunCgroup::Create(defaults.max_processes + 2, defaults.memory_bytes);
    if (!cg.ok()) return Status(cg.status().code(), "cgroup: " + cg.status().message());
    s.cgroup_.emplace(std::move(cg).value());
    join_files = s.cgroup_->join_files();
  }
  // The child's ends: stdin read, stdout write, stderr write, status write, request read.
  int child[5] = {-1, -1, -1, -1, -1};
  auto fail = [&](const char* what) {
    const int e = errno;
    for (int fd : child)
      if (fd >= 0) ::close(fd);
    return ErrnoStatus(what, e);
  };
  int p[2];
  // stdin is a socket, so that a program exiting without reading it cannot SIGPIPE the parent.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return fail("socketpair");
  child[0] = p[0], s.stdin_w_ = p[1];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail("pipe2");
  s.stdout_r_ = p[0], child[1] = p[1];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail("pipe2");
  s.stderr_r_ = p[0], child[2] = p[1];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail("pipe2");
  s.status_r_ = p[0], child[3] = p[1];
  // A socket, so that sending to a sandbox that died in set-up fails with EPIPE, not SIGPIPE.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) != 0) return fail("socketpair");
  s.request_w_ = p[0], child[4] = p[1];
  const pid_t helper = ::fork();
  if (helper < 0) return fail("fork");
  if (helper == 0) {
    for (int fd : {s.stdin_w_, s.stdout_r_, s.stderr_r_, s.status_r_, s.request_w_}) ::close(fd);
    RunHelper(s.root_, join_files, child[3], child[4], child[0], child[1], child[2]);
  }
  s.helper_ = helper;
  for (int fd : child) ::close(fd);
  return s;
}

PreparedSandbox::PreparedSandbox(PreparedSandbox&& o) noexcept
    : helper_(o.helper_),
      stdin_w_(o.stdin_w_),
      stdout_r_(o.stdout_r_),
      stderr_r_(o.stderr_r_),
      status_r_(o.status_r_),
      request_w_(o.request_w_),
      cpu_ns_(o.cpu_ns_),
      root_(std::move(o.root_)),
      cgroup_(std::move(o.cgroup_)),
      started_(o.started_) {
  o.helper_ = -1;
  o.stdin_w_ = o.stdout_r_ = o.stderr_r_ = o.status_r_ = o.request_w_ = -1;
  o.root_.clear();
  o.cgroup_.reset();
}

PreparedSandbox::~PreparedSandbox() {
  // The run's PID 1 is the helper's child: killing the helper and then closing the request
  // socket ends an unlaunched one; RunSandboxed has killed a launched one.
  Kill(-1);
  for (int* fd : {&stdin_w_, &stdout_r_, &stderr_r_, &status_r_, &request_w_}) CloseFd(fd);
  if (!root_.empty()) ::rmdir(root_.c_str());
  cgroup_.reset();  // kills whatever is left in the run's cgroup
}

bool PreparedSandbox::ReapHelper(int options) {
  struct rusage ru {};
  pid_t r;
  while ((r = ::wait4(helper_, nullptr, options, &ru)) < 0 && errno == EINTR) {
  }
  if (r == 0) return false;  // still running
  if (r == helper_) {
    // The helper's own time plus its reaped children's: the run's PID 1, which in turn holds the
    // processes of its pid namespace (the program among them).
    const auto ns = [](const timeval& t) {
      return int64_t(t.tv_sec) * 1000000000 + t.tv_usec * 1000;
    };
    cpu_ns_ += ns(ru.ru_utime) + ns(ru.ru_stime);
  }
  helper_ = -1;  // reaped, or not ours to wait for (ECHILD)
  return true;
}

void PreparedSandbox::Kill(pid_t pid1) {
  if (pid1 > 0) ::kill(pid1, SIGKILL);
  CloseFd(&request_w_);  // an unlaunched program reads EOF and exits
  if (helper_ <= 0) return;
  // The helper reaps the run's PID 1 and exits by itself: let it, so that no zombie of the run is
  // left to the host's init (it would count against the run cgroup's pids until reaped). A
  // helper that does not exit within 200 ms is killed.
  for (int i = 0; i < 200; ++i) {
    if (ReapHelper(WNOHANG)) return;
    ::usleep(i < 20 ? 50 : 1000);
  }
  ::kill(helper_, SIGKILL);
  ReapHelper(0);
}

bool PreparedSandbox::SetUpAlive() {
  if (helper_ <= 0) return false;
  return !ReapHelper(WNOHANG);
}

PreparedSandbox::Streams PreparedSandbox::TakeStreams() {
  const Streams s{stdin_w_, stdout_r_, stderr_r_, status_r_};
  stdin_w_ = stdout_r_ = stderr_r_ = status_r_ = -1;
  return s;
}

Status PreparedSandbox::Launch(const SandboxRequest& req,
                               std::chrono::steady_clock::time_point deadline) {
  if (cgroup_) {
    const Status limited =
        // The helper and, unless the program is PID 1, the init count too.
        cgroup_->SetLimits(req.limits.max_processes + (req.as_pid1 ? 1 : 2),
                           req.limits.memory_bytes);
    if (!limited.ok()) {
      CloseFd(&request_w_);  // the program reads EOF and exits
      return Status(limited.code(), "cgroup: " + limited.message());
    }
  }
  const std::string wire = EncodeRequest(req);
  size_t sent = 0;
  while (sent < wire.size()) {
    const ssize_t n =
        ::send(request_w_, wire.data() + sent, wire.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    const auto now = std::chrono::steady_clock::now();
    if (n < 0 && errno == EAGAIN && now < deadline) {
      pollfd w{request_w_, POLLOUT, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      (void)::poll(&w, 1, int(left.count()) + 1);
      continue;
    }
    const int e = n < 0 && errno != EAGAIN ? errno : ETIMEDOUT;
    CloseFd(&request_w_);  // the program reads a short request and exits
    return ErrnoStatus("send the sandbox request", e);
  }
  CloseFd(&request_w_);
  return Status::Ok();
}

}  // namespace marlaas::sandbox

#include "sandbox/seccomp_filter.h"

#include <errno.h>
#include <linux/filter.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace marlaas::sandbox {

const std::vector<std::string>& DeniedSyscallNames() {
  static const std::vector<std::string> kDenied = {
      "ptrace",
      "mount",
      "umount2",
      "unshare",
      "setns",
      "pivot_root",
      "chroot",
      "bpf",
      "keyctl",
      "add_key",
      "request_key",
      "perf_event_open",
      "kexec_load",
      "kexec_file_load",
      "init_module",
      "finit_module",
      "delete_module",
      "reboot",
      "swapon",
      "swapoff",
      "process_vm_writev",
      "process_vm_readv",
      "userfaultfd",
      "io_uring_setup",
      "io_uring_enter",
      "io_uring_register",
      "open_by_handle_at",
      "name_to_handle_at",
      "fanotify_init",
      "acct",
      "settimeofday",
      "clock_settime",
      "adjtimex",
      "sethostname",
      "setdomainname",
      "iopl",
      "ioperm",
      "syslog",
      "quotactl",
      "mknod",
      "mknodat",
      "personality",
      "kcmp",
      "lookup_dcookie",
      "move_mount",
      "open_tree",
      "fsopen",
      "fsmount",
      "fsconfig",
      "fspick",
      "mount_setattr",
      // Kernel-persistent IPC objects outlive the process that made them: in a sandbox that runs
      // several candidates one after another (python_tests_verifier.h) one could leave memory
      // charged to the run, or messages, for the next.
      "shmget",
      "semget",
      "msgget",
      "mq_open",
      // Another process's file descriptors or memory policy.
      "pidfd_getfd",
      "migrate_pages",
      "move_pages",
  };
  return kDenied;
}

std::vector<int> NewerSyscallNumbers() {
  std::vector<int> out;
#if defined(__x86_64__)
  constexpr int kNativeEnd = 512;  // 512 and up are x32's numbers, which the filter kills
  int newest = -1;
  for (int nr = 0; nr < kNativeEnd; ++nr) {
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
    if (name != nullptr) newest = nr;
    std::free(name);
  }
  for (int nr = newest + 1; newest >= 0 && nr < kNativeEnd; ++nr) out.push_back(nr);
#endif
  return out;
}

namespace {

// The rules into ctx; an error text, empty on success.
std::string AddDenyRules(scmp_filter_ctx ctx) {
  std::string err;
  for (const std::string& name : DeniedSyscallNames()) {
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) != 0) err = "rule " + name;
  }
  // Sockets: AF_UNIX only (no TCP, UDP, DNS, netlink, packet sockets).
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                       SCMP_A0(SCMP_CMP_NE, AF_UNIX)) != 0) {
    err = "rule socket";
  }
  // Scheduling, priority and limits of the calling process only (argument 0 means "the caller"):
  // with the same uid, a program could otherwise renice, pin or lower the limits of the process
  // that runs the next candidate, and the rlimits and nice value it passes on.
  for (const char* name : {"prlimit64", "sched_setaffinity", "sched_setparam", "sched_setscheduler",
                           "sched_setattr"}) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr != __NR_SCMP_ERROR &&
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, SCMP_A0(SCMP_CMP_NE, 0)) != 0) {
      err = std::string("rule ") + name;
    }
  }
  // setpriority(which, who) and ioprio_set(which, who): only which == "a process" (PRIO_PROCESS,
  // 0; IOPRIO_WHO_PROCESS, 1) with who == 0. Rules on one syscall are OR-ed.
  constexpr uint64_t kIoprioWhoProcess = 1;
  for (const auto& [name, process] :
       {std::pair<const char*, uint64_t>{"setpriority", PRIO_PROCESS},
        std::pair<const char*, uint64_t>{"ioprio_set", kIoprioWhoProcess}}) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, SCMP_A0(SCMP_CMP_NE, process)) != 0 ||
        seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1, SCMP_A1(SCMP_CMP_NE, 0)) != 0) {
      err = std::string("rule ") + name;
    }
  }
  // New namespaces through clone flags (one rule per flag; rules on one syscall are OR-ed).
  // clone3 keeps its flags in memory a filter cannot read, so it fails with ENOSYS and libc
  // falls back to clone.
  for (uint64_t flag : {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC,
                        CLONE_NEWUTS, CLONE_NEWCGROUP}) {
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                         SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag)) != 0) {
      err = "rule clone";
    }
  }
  // Syscalls newer than this libseccomp (the mount API's listmount, statmount, open_tree_attr
  // on a 6.x kernel): none was reviewed for this list, so none is reachable.
  for (int nr : NewerSyscallNumbers()) {
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0) != 0) {
      err = "rule for syscall " + std::to_string(nr);
    }
  }
  const int clone3 = seccomp_syscall_resolve_name("clone3");
  if (clone3 != __NR_SCMP_ERROR && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), clone3, 0) != 0) {
    err = "rule clone3";
  }
  return err;
}

// libseccomp 2.5 exports BPF only to a file descriptor: a memfd, read back.
SeccompProgram Compile() {
  SeccompProgram p;
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) {
    p.error = "seccomp_init failed";
    return p;
  }
  p.error = AddDenyRules(ctx);
  const int fd = p.error.empty() ? ::memfd_create("marlaas-seccomp", MFD_CLOEXEC) : -1;
  if (p.error.empty() && fd < 0) p.error = std::string("memfd_create: ") + std::strerror(errno);
  if (fd >= 0) {
    const int rc = seccomp_export_bpf(ctx, fd);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    if (rc != 0 || size <= 0 || size % off_t(sizeof(sock_filter)) != 0) {
      p.error = "seccomp_export_bpf failed";
    } else {
      p.instructions.resize(size_t(size) / sizeof(sock_filter));
      if (::pread(fd, p.instructions.data(), size_t(size), 0) != ssize_t(size)) {
        p.error = "reading the exported filter failed";
        p.instructions.clear();
      }
    }
    ::close(fd);
  }
  seccomp_release(ctx);
  return p;
}

}  // namespace

const SeccompProgram& DenyListProgram() {
  static const SeccompProgram program = Compile();
  return program;
}

int InstallSeccompProgram(const SeccompProgram& p) {
  if (!p.error.empty() || p.instructions.empty()) return EINVAL;
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(p.instructions.size());
  prog.filter = const_cast<sock_filter*>(p.instructions.data());
  return ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0 ? 0 : errno;
}

std::string InstallSeccompDenyList() {
  const SeccompProgram& p = DenyListProgram();
  if (!p.error.empty()) return p.error;
  const int e = InstallSeccompProgram(p);
  return e == 0 ? std::string() : std::string("installing the filter: ") + std::strerror(e);
}

}  // namespace marlaas::sandbox

#include "sandbox/seccomp_filter.h"

#include <errno.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/socket.h>

namespace marlaas::sandbox {

std::string InstallSeccompDenyList() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return "seccomp_init failed";
  static const char* const kDenied[] = {
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
  };
  std::string err;
  for (const char* name : kDenied) {
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) != 0) err = std::string("rule ") + name;
  }
  // Sockets: AF_UNIX only (no TCP, UDP, DNS, netlink, packet sockets).
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
                       SCMP_A0(SCMP_CMP_NE, AF_UNIX)) != 0) {
    err = "rule socket";
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
  const int clone3 = seccomp_syscall_resolve_name("clone3");
  if (clone3 != __NR_SCMP_ERROR && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), clone3, 0) != 0) {
    err = "rule clone3";
  }
  if (err.empty() && seccomp_load(ctx) != 0) err = "seccomp_load failed";
  seccomp_release(ctx);
  return err;
}

}  // namespace marlaas::sandbox

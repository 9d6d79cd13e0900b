// The seccomp-bpf deny-list every sandboxed program runs under (libseccomp): the syscalls that
// reach other processes, the kernel's attack surface or namespace and mount changes fail with
// EPERM; sockets other than AF_UNIX too; so do kernel-persistent IPC objects (SysV, POSIX message
// queues) and setting another process's priority, scheduling, affinity or rlimits (only the
// caller's, argument 0); syscalls newer than the linked libseccomp fail with ENOSYS. Everything
// else is allowed (interpreters need a wide set). Installed in
// the child after no_new_privs, just before execve.
//
// The filter is compiled to BPF once per process (DenyListProgram) and installed with one prctl
// that allocates nothing: the child installs it after its rlimits, and a small RLIMIT_AS below
// the parent's inherited address space (a LibTorch process maps gigabytes) would make any
// allocation there fail (libseccomp's own compile, run in the child, crashed on that).
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

namespace marlaas::sandbox {

// The syscalls that fail with EPERM whatever their arguments (those this architecture has).
const std::vector<std::string>& DeniedSyscallNames();
// The native syscall numbers above the newest that the linked libseccomp can name (x86_64:
// up to 511; elsewhere none): they fail with ENOSYS, as on a kernel that lacks them, since no
// one weighed them for the deny list (the newer mount API calls among them). Programs fall back
// on ENOSYS, as they do on older kernels.
std::vector<int> NewerSyscallNumbers();

struct SeccompProgram {
  std::vector<sock_filter> instructions;
  std::string error;  // empty when compiled
};

// Compiled on first use (thread-safe); call it before forking a child that installs it.
const SeccompProgram& DenyListProgram();

// Installs a compiled program on the calling thread without allocating; 0 or an errno.
int InstallSeccompProgram(const SeccompProgram& p);

// DenyListProgram() installed on the calling thread; an error text, empty on success.
std::string InstallSeccompDenyList();

}  // namespace marlaas::sandbox

// The seccomp-bpf deny-list every sandboxed program runs under (libseccomp): the syscalls that
// reach other processes, the kernel's attack surface or namespace and mount changes fail with
// EPERM; sockets other than AF_UNIX too. Everything else is allowed (interpreters need a wide
// set). Installed in the child after no_new_privs, just before execve.
#pragma once

#include <string>

namespace marlaas::sandbox {

// Installs the filter on the calling thread; returns an error text, empty on success.
std::string InstallSeccompDenyList();

}  // namespace marlaas::sandbox

// ProcessIdentity: a pid plus its kernel start time, so a recycled pid is never mistaken for the
// process that registered itself. Used by shared-memory peers to tell whether the other side
// is still alive. Thread-safe; every call reads /proc.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace marlaas {

struct ProcessIdentity {
  pid_t pid = 0;
  // Start time in clock ticks since boot (field 22 of /proc/<pid>/stat), truncated to 32 bits.
  uint32_t start_ticks = 0;

  // Packs into one word so it can be published with a single atomic store.
  uint64_t Pack() const { return (uint64_t(uint32_t(pid)) << 32) | start_ticks; }
  static ProcessIdentity Unpack(uint64_t word) {
    return ProcessIdentity{pid_t(word >> 32), uint32_t(word)};
  }
  bool empty() const { return pid == 0; }
};

// The calling process.
ProcessIdentity SelfIdentity();
// Identity of `pid` now, or an empty identity if there is no such process.
ProcessIdentity IdentityOf(pid_t pid);
// True while the process that registered `id` runs. Zombies and recycled pids count as dead.
bool IsAlive(const ProcessIdentity& id);

}  // namespace marlaas

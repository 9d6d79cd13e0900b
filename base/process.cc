#include "base/process.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace marlaas {
namespace {

// Reads /proc/<pid>/stat; returns false if the process is gone. Fills state and start ticks.
bool ReadStat(pid_t pid, char* state, uint64_t* start_ticks) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", int(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name (field 2) may contain spaces and ')': fields resume after the last ')'.
  char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] == '\0') return false;
  p += 2;
  *state = *p;
  // Field 3 is the state; the start time is field 22, i.e. 19 fields further.
  for (int field = 3; field < 22; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return false;
    ++p;
  }
  *start_ticks = std::strtoull(p, nullptr, 10);
  return true;
}

}  // namespace

ProcessIdentity SelfIdentity() { return IdentityOf(::getpid()); }

ProcessIdentity IdentityOf(pid_t pid) {
  char state = 0;
  uint64_t ticks = 0;
  if (pid <= 0 || !ReadStat(pid, &state, &ticks)) return ProcessIdentity{};
  return ProcessIdentity{pid, uint32_t(ticks)};
}

bool IsAlive(const ProcessIdentity& id) {
  if (id.pid <= 0) return false;
  char state = 0;
  uint64_t ticks = 0;
  if (!ReadStat(id.pid, &state, &ticks)) return false;
  if (state == 'Z' || state == 'X') return false;  // exited, not yet reaped
  return uint32_t(ticks) == id.start_ticks;
}

}  // namespace marlaas

#include "procs/serve/state_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <thread>

#include "base/process.h"

namespace marlaas::serve {
namespace {

// The holder the file names, or an empty identity.
ProcessIdentity Holder(int fd) {
  char text[64] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  int pid = 0;
  uint32_t ticks = 0;
  if (n <= 0 || std::sscanf(text, "%d %" SCNu32, &pid, &ticks) != 2 || pid <= 0) return {};
  return ProcessIdentity{pid_t(pid), ticks};
}

}  // namespace

Result<int> AcquireStateDirLock(const std::string& state_dir, int wait_ms) {
  const std::string path = state_dir + "/service.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);  // inherited by the stages
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const ProcessIdentity holder = Holder(fd);
    if (holder.pid != ::getpid() && IsAlive(holder)) {
      ::close(fd);
      return Status(StatusCode::kAlreadyExists,
                    "another service (pid " + std::to_string(holder.pid) + ") serves " + state_dir +
                        ": stop it first, or give this one another --state-dir");
    }
    if (std::chrono::steady_clock::now() >= give_up) {
      ::close(fd);
      return Status(StatusCode::kAlreadyExists,
                    "the stage processes of an earlier service still use " + state_dir + " (" +
                        path + " is locked" +
                        (holder.empty() ? std::string()
                                        : ", by stages of pid " + std::to_string(holder.pid)) +
                        ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const ProcessIdentity self = SelfIdentity();
  char text[64];
  const int len =
      std::snprintf(text, sizeof(text), "%d %" PRIu32 "\n", int(self.pid), self.start_ticks);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text, size_t(len), 0) != len) {
    const int e = errno;
    ::close(fd);
    return ErrnoStatus("write " + path, e);
  }
  return fd;
}

}  // namespace marlaas::serve

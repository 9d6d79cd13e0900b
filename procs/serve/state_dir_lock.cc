#include "procs/serve/state_dir_lock.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "base/process.h"

namespace marlaas::serve {
namespace {

struct Holder {
  ProcessIdentity id;  // empty: the file names nobody
  bool stopping = false;
};

Holder ReadHolder(int fd) {
  char text[96] = {}, word[16] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  int pid = 0;
  uint32_t ticks = 0;
  const int fields = n > 0 ? std::sscanf(text, "%d %" SCNu32 " %15s", &pid, &ticks, word) : 0;
  if (fields < 2 || pid <= 0) return {};
  return {ProcessIdentity{pid_t(pid), ticks}, fields == 3 && std::strcmp(word, "stopping") == 0};
}

bool WriteHolder(int fd, bool stopping) {
  const ProcessIdentity self = SelfIdentity();
  char text[96];
  const int len = std::snprintf(text, sizeof(text), "%d %" PRIu32 "%s\n", int(self.pid),
                                self.start_ticks, stopping ? " stopping" : "");
  return ::ftruncate(fd, 0) == 0 && ::pwrite(fd, text, size_t(len), 0) == len;
}

// The other processes that hold the lock on `path` (those this user may look at), as "pid N
// (name)" joined by ", ", so that one that does not end on its own can be stopped. A descriptor
// is compared by the name its link reads (stat on every descriptor of every process could hang
// on a dead network mount), and counted only when its fdinfo shows a lock: a second serve that
// merely has the file open, waiting, is not a holder.
std::string ProcessesHoldingLock(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved) == nullptr) return "";
  const std::string target = resolved;
  std::string found;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return "";
  while (const dirent* p = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(p->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == ::getpid()) continue;
    const std::string base = std::string("/proc/") + p->d_name;
    DIR* dir = ::opendir((base + "/fd").c_str());
    if (dir == nullptr) continue;  // gone, or another user's
    bool holds = false;
    while (const dirent* f = ::readdir(dir)) {
      if (f->d_name[0] == '.') continue;
      char link[PATH_MAX];
      const ssize_t n = ::readlink((base + "/fd/" + f->d_name).c_str(), link, sizeof(link) - 1);
      if (n <= 0 || std::string(link, size_t(n)) != target) continue;
      std::ifstream info(base + "/fdinfo/" + f->d_name);
      for (std::string line; std::getline(info, line);)
        holds = holds || line.rfind("lock:", 0) == 0;
      if (holds) break;
    }
    ::closedir(dir);
    if (!holds) continue;
    char name[64] = {};
    if (FILE* comm = std::fopen((base + "/comm").c_str(), "r")) {
      if (std::fgets(name, sizeof(name), comm) != nullptr) name[std::strcspn(name, "\n")] = '\0';
      std::fclose(comm);
    }
    found += (found.empty() ? "" : ", ") + std::string("pid ") + p->d_name + " (" + name + ")";
  }
  ::closedir(proc);
  return found;
}

}  // namespace

Result<int> AcquireStateDirLock(const std::string& state_dir, int wait_ms, int live_grace_ms) {
  const std::string path = state_dir + "/service.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);  // inherited by the stages
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  const auto t0 = std::chrono::steady_clock::now();
  const auto give_up = t0 + std::chrono::milliseconds(wait_ms);
  const auto grace_over = t0 + std::chrono::milliseconds(live_grace_ms);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const Holder holder = ReadHolder(fd);
    const bool other_alive = holder.id.pid != ::getpid() && IsAlive(holder.id);
    const auto now = std::chrono::steady_clock::now();
    if (other_alive && !holder.stopping && now >= grace_over) {
      ::close(fd);
      return Status(StatusCode::kAlreadyExists,
                    "another service (pid " + std::to_string(holder.id.pid) + ") serves " +
                        state_dir + ": stop it first, or give this one another --state-dir");
    }
    if (now >= give_up) {
      ::close(fd);
      if (other_alive) {
        return Status(StatusCode::kAlreadyExists,
                      "another service (pid " + std::to_string(holder.id.pid) +
                          "), stopping, still uses " + state_dir + " (" + path + " is locked)");
      }
      // A stage of a dead service that did not end (stopped, or stuck in the kernel) holds it
      // for good: name it, so that it can be ended.
      const std::string holders = ProcessesHoldingLock(path);
      return Status(StatusCode::kAlreadyExists,
                    "the stage processes of an earlier service still use " + state_dir + " (" +
                        path + " is locked" +
                        (holders.empty() ? ")"
                                         : " by " + holders +
                                               "; they end on their own within seconds of their "
                                               "service: one that has not can be stopped with "
                                               "kill -9 PID)"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!WriteHolder(fd, /*stopping=*/false)) {
    const int e = errno;
    ::close(fd);
    return ErrnoStatus("write " + path, e);
  }
  return fd;
}

void MarkStateDirLockStopping(int fd) {
  if (fd >= 0) (void)WriteHolder(fd, /*stopping=*/true);
}

}  // namespace marlaas::serve

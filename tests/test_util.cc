#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "shm/stale_segments.h"

namespace marlaas::testing {

std::string UniqueInstance() {
  static std::atomic<int> counter{0};
  return "t" + std::to_string(::getpid()) + "x" + std::to_string(counter.fetch_add(1));
}

ScopedInstance::~ScopedInstance() {
  auto list = ListSegments(name_);
  if (!list.ok()) return;
  for (const auto& s : *list) ::shm_unlink(("/" + s.system_name).c_str());
}

bool UsePrivateDevShm(const char* size) {
  const std::string options = std::string("size=") + size;
  return ::unshare(CLONE_NEWNS) == 0 &&
         ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         ::mount("tmpfs", "/dev/shm", "tmpfs", 0, options.c_str()) == 0;
}

bool LimitAddressSpaceToMappedPlus(pid_t pid, long extra_kb, unsigned long long* old_soft) {
  long vm_kb = 0;
  std::ifstream status("/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) +
                       "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) vm_kb = std::stol(line.substr(7));
  struct rlimit old {};
  if (vm_kb == 0 || ::prlimit(pid, RLIMIT_AS, nullptr, &old) != 0) return false;
  if (old_soft != nullptr) *old_soft = old.rlim_cur;
  return SetSoftAddressSpaceLimit(pid, (unsigned long long)(vm_kb + extra_kb) << 10);
}

bool SetSoftAddressSpaceLimit(pid_t pid, unsigned long long soft) {
  struct rlimit r {};
  if (::prlimit(pid, RLIMIT_AS, nullptr, &r) != 0) return false;
  r.rlim_cur = rlim_t(soft);
  return ::prlimit(pid, RLIMIT_AS, &r, nullptr) == 0;
}

pid_t ForkChild(const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // A child never outlives its test process, even one killed by a ctest timeout.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(113);
    int rc = 111;
    try {
      rc = body();
    } catch (...) {
      rc = 112;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  return pid;
}

namespace {

ChildExit ExitOf(int status) {
  ChildExit out;
  if (WIFEXITED(status)) {
    out.exited = true;
    out.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    out.signal = WTERMSIG(status);
  }
  return out;
}

}  // namespace

ChildExit WaitChild(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return ChildExit{};
  return ExitOf(status);
}

ChildExit WaitChildFor(pid_t pid, double seconds) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(seconds * 1000));
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return ExitOf(status);
    if (r < 0) return ChildExit{};
    if (std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ChildExit out = KillChild(pid);
  out.timed_out = true;
  return out;
}

ChildExit KillChild(pid_t pid) {
  ::kill(pid, SIGKILL);
  return WaitChild(pid);
}

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void FillPattern(uint64_t seq, unsigned char* out, size_t n) {
  uint64_t state = seq * 7919 + 17;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = SplitMix64(&state);
    std::memcpy(out + i, &w, 8);
  }
  if (i < n) {
    uint64_t w = SplitMix64(&state);
    std::memcpy(out + i, &w, n - i);
  }
}

bool CheckPattern(uint64_t seq, const unsigned char* data, size_t n) {
  uint64_t state = seq * 7919 + 17;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = SplitMix64(&state);
    if (std::memcmp(data + i, &w, 8) != 0) return false;
  }
  if (i < n) {
    uint64_t w = SplitMix64(&state);
    if (std::memcmp(data + i, &w, n - i) != 0) return false;
  }
  return true;
}

void* MapSharedBytes(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void UnmapSharedBytes(void* p, size_t bytes) {
  if (p != nullptr) munmap(p, bytes);
}

bool WaitForFlag(const std::atomic<int>& flag, int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (flag.load() == 0) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

ScopedTempDir::ScopedTempDir(const std::string& tag) : path_(::testing::TempDir()) {
  if (!path_.empty() && path_.back() == '/') path_.pop_back();
  path_ += "/marlaas-" + tag + "-" + UniqueInstance();
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  std::filesystem::create_directories(path_, ec);
}

ScopedTempDir::~ScopedTempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) {
    had_ = true;
    old_ = old;
  }
  if (value != nullptr) {
    ::setenv(name, value, 1);
  } else {
    ::unsetenv(name);
  }
}

ScopedEnv::~ScopedEnv() {
  if (had_) {
    ::setenv(name_.c_str(), old_.c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

ChildGuard::~ChildGuard() {
  for (pid_t pid : pids_) KillChild(pid);
}

pid_t ChildGuard::Fork(const std::function<int()>& body) {
  const pid_t pid = ForkChild(body);
  if (pid > 0) pids_.push_back(pid);
  return pid;
}

ChildExit ChildGuard::Wait(pid_t pid) {
  Release(pid);
  return WaitChild(pid);
}

ChildExit ChildGuard::Kill(pid_t pid) {
  Release(pid);
  return KillChild(pid);
}

void ChildGuard::Release(pid_t pid) {
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (pids_[i] == pid) {
      pids_.erase(pids_.begin() + std::ptrdiff_t(i));
      return;
    }
  }
}

}  // namespace marlaas::testing

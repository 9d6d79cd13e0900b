// Helpers shared by the tests: unique service-instance names whose segments are removed at the
// end of a test, and forked child processes that run a lambda.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace marlaas::testing {

// "t<pid>x<n>": unique per call in this process and across concurrently running test binaries.
std::string UniqueInstance();

// Removes every segment of `instance` when it goes out of scope.
class ScopedInstance {
 public:
  ScopedInstance() : name_(UniqueInstance()) {}
  ~ScopedInstance();
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// In a forked child: moves it into a mount namespace of its own with a fresh tmpfs of `size`
// (mount's option, "1m") on /dev/shm, so that it can run out of shared memory without touching
// the machine's. False (with errno) where that is not allowed (not root): the caller skips.
bool UsePrivateDevShm(const char* size);

// Forks; the child runs body() and _exits with its return value (it never returns into gtest).
pid_t ForkChild(const std::function<int()>& body);

// Sets the soft address-space limit (RLIMIT_AS) of `pid` (0: this process) to what it has mapped
// now plus `extra_kb`, so that it runs out of memory for real; the hard limit stays. False when
// that failed; `old_soft` gets the soft limit it had (for SetSoftAddressSpaceLimit).
bool LimitAddressSpaceToMappedPlus(pid_t pid, long extra_kb,
                                   unsigned long long* old_soft = nullptr);
bool SetSoftAddressSpaceLimit(pid_t pid, unsigned long long soft);

struct ChildExit {
  bool exited = false;     // normal exit
  int code = -1;           // exit code if exited
  int signal = 0;          // terminating signal otherwise
  bool timed_out = false;  // WaitChildFor: it did not exit in time and was killed
};
ChildExit WaitChild(pid_t pid);
// Waits at most `seconds` for `pid` to exit; past that SIGKILLs and reaps it, with `timed_out`.
ChildExit WaitChildFor(pid_t pid, double seconds);
// SIGKILL and reap.
ChildExit KillChild(pid_t pid);

// A T constructed in an anonymous MAP_SHARED mapping, so forked children and the test share it
// (flags, counters); UnmapShared releases it.
void* MapSharedBytes(size_t bytes);
void UnmapSharedBytes(void* p, size_t bytes);
template <typename T>
T* MapShared() {
  return new (MapSharedBytes(sizeof(T))) T();
}
template <typename T>
void UnmapShared(T* p) {
  UnmapSharedBytes(p, sizeof(T));
}

// Waits until `flag` is non-zero (set by another process); false after `seconds`.
bool WaitForFlag(const std::atomic<int>& flag, int seconds = 60);

// Children of a test that must not outlive it: on destruction (an ASSERT that returned early
// included) every child not yet waited for or killed is killed and reaped.
class ChildGuard {
 public:
  ChildGuard() = default;
  ChildGuard(const ChildGuard&) = delete;
  ChildGuard& operator=(const ChildGuard&) = delete;
  ~ChildGuard();
  pid_t Fork(const std::function<int()>& body);  // ForkChild, held
  ChildExit Wait(pid_t pid);                     // WaitChild, released
  ChildExit Kill(pid_t pid);                     // KillChild, released

 private:
  void Release(pid_t pid);
  std::vector<pid_t> pids_;
};

// Runs `f` when it goes out of scope, a failed ASSERT's early return included.
class ScopeExit {
 public:
  explicit ScopeExit(std::function<void()> f) : f_(std::move(f)) {}
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;
  ~ScopeExit() {
    if (f_) f_();
  }

 private:
  std::function<void()> f_;
};

// A fresh directory, unique to this process and call, under the test temp dir
// (::testing::TempDir()); removed with everything in it when it goes out of scope.
class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& tag = "dir");
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  ~ScopedTempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets (or with `value` null, unsets) an environment variable, and puts back what it was when it
// goes out of scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value);
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv();

 private:
  std::string name_;
  bool had_ = false;
  std::string old_;
};

// Deterministic pseudo-random bytes for record `seq` (splitmix64 stream).
void FillPattern(uint64_t seq, unsigned char* out, size_t n);
bool CheckPattern(uint64_t seq, const unsigned char* data, size_t n);
uint64_t SplitMix64(uint64_t* state);

}  // namespace marlaas::testing

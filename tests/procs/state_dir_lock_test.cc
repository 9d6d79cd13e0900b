// One service per state dir (procs/serve/state_dir_lock.h), with real processes: a live holder
// refuses a second service at once, naming it; a dead holder's descendants (its stages) are
// waited for; the holder recorded is the process that took the lock last.
#include "procs/serve/state_dir_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "base/file_util.h"
#include "base/process.h"
#include "tests/test_util.h"

namespace marlaas::serve {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Waits for a byte on `fd` (the child's "I hold it"), at most 10 s.
bool AwaitByte(int fd) {
  char c;
  fd_set set;
  FD_ZERO(&set);
  FD_SET(fd, &set);
  timeval tv{10, 0};
  return ::select(fd + 1, &set, nullptr, nullptr, &tv) == 1 && ::read(fd, &c, 1) == 1;
}

TEST(StateDirLockTest, ALiveOtherHolderIsRefusedAtOnceByPid) {
  const testing::ScopedTempDir tmp("lock-live");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    auto fd = AcquireStateDirLock(tmp.path(), 1000);
    (void)!::write(ready[1], fd.ok() ? "1" : "0", 1);
    ::pause();  // until killed
    ::_exit(0);
  }
  ASSERT_TRUE(AwaitByte(ready[0]));
  const auto t0 = std::chrono::steady_clock::now();
  auto second = AcquireStateDirLock(tmp.path(), 60000);
  const double waited = SecondsSince(t0);
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("another service (pid " + std::to_string(holder) +
                                           ") serves " + tmp.path()),
            std::string::npos)
      << second.status().message();
  EXPECT_LT(waited, 10.0) << "waited for a live holder instead of refusing";
  // The holder is gone (and had no stages): the lock is free and names this process now.
  auto mine = AcquireStateDirLock(tmp.path(), 5000);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  const ProcessIdentity self = SelfIdentity();
  EXPECT_EQ(*ReadFile(tmp.path() + "/service.lock"),
            std::to_string(self.pid) + " " + std::to_string(self.start_ticks) + "\n");
  ::close(*mine);
  ::close(ready[0]);
  ::close(ready[1]);
}

// A service killed with its stages still running: they hold the lock until they end, and a new
// service waits for them instead of refusing (or of running beside them).
TEST(StateDirLockTest, ADeadHoldersStagesAreWaitedFor) {
  const testing::ScopedTempDir tmp("lock-dead");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t service = ::fork();
  ASSERT_GE(service, 0);
  if (service == 0) {
    auto fd = AcquireStateDirLock(tmp.path(), 1000);
    if (!fd.ok()) ::_exit(1);
    if (::fork() == 0) {  // a "stage": inherits the descriptor, outlives the service by 1.5 s
      (void)!::write(ready[1], "1", 1);
      ::usleep(1500 * 1000);
      ::_exit(0);
    }
    ::_exit(0);
  }
  ASSERT_TRUE(AwaitByte(ready[0]));
  int status = 0;
  ASSERT_EQ(::waitpid(service, &status, 0), service);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto next = AcquireStateDirLock(tmp.path(), 30000);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_GT(SecondsSince(t0), 0.5) << "took the lock while the dead service's stage held it";
  ::close(*next);
  // This process's own earlier service's stages are waited for too, up to the limit, and the
  // refusal then says so.
  auto first = AcquireStateDirLock(tmp.path(), 1000);
  ASSERT_TRUE(first.ok());
  auto again = AcquireStateDirLock(tmp.path(), 300);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("the stage processes of an earlier service still use"),
            std::string::npos)
      << again.status().message();
  ::close(*first);
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace marlaas::serve

// One service per state dir (procs/serve/state_dir_lock.h), with real processes: a live holder
// refuses a second service within its grace, naming it; a stopping holder, and a dead holder's
// descendants (its stages), are waited for; the file names the process that took the lock last.
#include "procs/serve/state_dir_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "base/file_util.h"
#include "base/process.h"
#include "tests/test_util.h"

namespace marlaas::serve {
namespace {

// Waits for `n` bytes on `fd` (a child's "I hold it", written by one write), at most 10 s.
bool AwaitBytes(int fd, void* out, size_t n) {
  fd_set set;
  FD_ZERO(&set);
  FD_SET(fd, &set);
  timeval tv{10, 0};
  return ::select(fd + 1, &set, nullptr, nullptr, &tv) == 1 && ::read(fd, out, n) == ssize_t(n);
}

bool AwaitByte(int fd) {
  char c;
  return AwaitBytes(fd, &c, 1);
}

// Blocks until the other end of `fd` is closed.
void AwaitEof(int fd) {
  char c;
  while (::read(fd, &c, 1) > 0) {
  }
}

// AcquireStateDirLock on a thread, so that the test can see it is still waiting.
class Acquirer {
 public:
  explicit Acquirer(const std::string& dir)
      : thread_([this, dir] {
          result_.emplace(AcquireStateDirLock(dir, 30000));
          done_ = true;
        }) {}
  ~Acquirer() { Join(); }
  bool done() const { return done_; }
  const Result<int>& Join() {
    if (thread_.joinable()) thread_.join();
    return *result_;
  }

 private:
  std::atomic<bool> done_{false};
  std::optional<Result<int>> result_;
  std::thread thread_;
};

std::string HolderLine(bool stopping) {
  const ProcessIdentity self = SelfIdentity();
  return std::to_string(self.pid) + " " + std::to_string(self.start_ticks) +
         (stopping ? " stopping" : "") + "\n";
}

TEST(StateDirLockTest, ALiveOtherHolderIsRefusedByPidAndAStoppingOneIsWaitedFor) {
  const testing::ScopedTempDir tmp("lock-live");
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    ::close(release[1]);
    auto fd = AcquireStateDirLock(tmp.path(), 1000);
    if (!fd.ok()) ::_exit(1);
    (void)!::write(ready[1], "1", 1);
    AwaitEof(release[0]);  // first release: begin to stop
    MarkStateDirLockStopping(*fd);
    (void)!::write(ready[1], "2", 1);
    ::usleep(1500 * 1000);  // stopping takes a while
    ::_exit(0);
  }
  ::close(release[0]);
  ASSERT_TRUE(AwaitByte(ready[0]));
  auto second = AcquireStateDirLock(tmp.path(), 60000);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(second.status().message().find("another service (pid " + std::to_string(holder) +
                                           ") serves " + tmp.path()),
            std::string::npos)
      << second.status().message();
  // The holder begins to stop (serve got SIGTERM): a serve started now waits for it.
  ::close(release[1]);
  ASSERT_TRUE(AwaitByte(ready[0]));
  const auto third = AcquireStateDirLock(tmp.path(), 30000);
  int status = 0;
  ASSERT_EQ(::waitpid(holder, &status, 0), holder);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(*ReadFile(tmp.path() + "/service.lock"), HolderLine(false));
  MarkStateDirLockStopping(*third);
  EXPECT_EQ(*ReadFile(tmp.path() + "/service.lock"), HolderLine(true));
  ::close(*third);
  ::close(ready[0]);
  ::close(ready[1]);
}

// A service killed with its stages still running: they hold the lock until they end, and a new
// service waits for them instead of refusing (or of running beside them).
TEST(StateDirLockTest, ADeadHoldersStagesAreWaitedFor) {
  const testing::ScopedTempDir tmp("lock-dead");
  int ready[2], release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t service = ::fork();
  ASSERT_GE(service, 0);
  if (service == 0) {
    ::close(release[1]);
    auto fd = AcquireStateDirLock(tmp.path(), 1000);
    if (!fd.ok()) ::_exit(1);
    if (::fork() == 0) {  // a "stage": inherits the descriptor, outlives the service
      const pid_t self = ::getpid();
      (void)!::write(ready[1], &self, sizeof(self));
      AwaitEof(release[0]);
      ::_exit(0);
    }
    ::_exit(0);
  }
  ::close(release[0]);
  pid_t stage = 0;
  ASSERT_TRUE(AwaitBytes(ready[0], &stage, sizeof(stage)));
  int status = 0;
  ASSERT_EQ(::waitpid(service, &status, 0), service);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Given up on, the refusal names the process that holds the lock (a stage that does not end
  // kept every later service out, and nothing said which process to stop).
  auto refused = AcquireStateDirLock(tmp.path(), 300);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("is locked by pid " + std::to_string(stage) + " ("),
            std::string::npos)
      << refused.status().message();
  {
    Acquirer next(tmp.path());
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the live grace
    EXPECT_FALSE(next.done())
        << "took the lock, or gave up, while the dead service's stage held it";
    ::close(release[1]);  // the stage ends
    const Result<int>& got = next.Join();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ::close(*got);
  }
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

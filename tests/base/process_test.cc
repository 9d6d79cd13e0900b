// Process identity: alive, exited (zombie and reaped), and a recycled pid.
#include "base/process.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/test_util.h"

namespace marlaas {
namespace {

TEST(ProcessTest, SelfIsAliveAndPacksRoundTrip) {
  const ProcessIdentity self = SelfIdentity();
  EXPECT_EQ(self.pid, getpid());
  EXPECT_TRUE(IsAlive(self));
  const ProcessIdentity back = ProcessIdentity::Unpack(self.Pack());
  EXPECT_EQ(back.pid, self.pid);
  EXPECT_EQ(back.start_ticks, self.start_ticks);
}

TEST(ProcessTest, ExitedChildIsDeadBeforeAndAfterReaping) {
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  pid_t child = testing::ForkChild([&] {
    char c;
    return int(read(go[0], &c, 1) == 1 ? 0 : 1);
  });
  const ProcessIdentity id = IdentityOf(child);
  ASSERT_EQ(id.pid, child);
  EXPECT_TRUE(IsAlive(id));
  ASSERT_EQ(write(go[1], "x", 1), 1);
  // Until reaped, the child is a zombie: still in /proc, but not alive.
  for (int i = 0; i < 2000 && IsAlive(id); ++i) usleep(1000);
  EXPECT_FALSE(IsAlive(id));
  testing::WaitChild(child);
  EXPECT_FALSE(IsAlive(id));
  EXPECT_TRUE(IdentityOf(child).empty());
  close(go[0]);
  close(go[1]);
}

TEST(ProcessTest, RecycledPidWithAnotherStartTimeIsNotAlive) {
  ProcessIdentity id = SelfIdentity();
  id.start_ticks += 1;  // same pid, different process incarnation
  EXPECT_FALSE(IsAlive(id));
  EXPECT_FALSE(IsAlive(ProcessIdentity{}));
}

}  // namespace
}  // namespace marlaas

// ActiveLimit: the rollout's cap on sequences in its generator under memory pressure.
#include "procs/rollout/active_limit.h"

#include <gtest/gtest.h>

namespace marlaas::rollout {
namespace {

// Half the batch goes at each failure, down to one sequence, which is tried alone
// kAloneTries times before it is given up; a good pass in between starts that count again.
TEST(ActiveLimitTest, FailuresHalveTheBatchDownToOneThenGiveUpOnIt) {
  ActiveLimit limit(96);
  EXPECT_EQ(limit.limit(), 96u);
  EXPECT_EQ(limit.OutOfMemory(96), 48u);
  EXPECT_EQ(limit.limit(), 48u);
  EXPECT_EQ(limit.OutOfMemory(48), 24u);
  EXPECT_EQ(limit.OutOfMemory(3), 1u);  // 2 stay
  EXPECT_EQ(limit.limit(), 2u);
  EXPECT_EQ(limit.OutOfMemory(6), 4u);  // past the limit of 2 (tool results came back): 2 stay
  EXPECT_EQ(limit.limit(), 2u);
  EXPECT_EQ(limit.OutOfMemory(2), 1u);
  EXPECT_EQ(limit.limit(), 1u);
  EXPECT_EQ(limit.failures_in_a_row(), 5);
  for (int k = 1; k < ActiveLimit::kAloneTries; ++k) {
    EXPECT_EQ(limit.OutOfMemory(1), 0u);
    EXPECT_FALSE(limit.GiveUpAlone()) << k;
  }
  limit.GoodPass();  // it went through once: the count starts again
  EXPECT_EQ(limit.failures_in_a_row(), 0);
  for (int k = 1; k < ActiveLimit::kAloneTries; ++k) EXPECT_EQ(limit.OutOfMemory(1), 0u);
  EXPECT_FALSE(limit.GiveUpAlone());
  EXPECT_EQ(limit.OutOfMemory(1), 0u);
  EXPECT_TRUE(limit.GiveUpAlone());
  limit.Reset();  // that sequence is gone: the others may run as many as before
  EXPECT_FALSE(limit.GiveUpAlone());
  EXPECT_EQ(limit.limit(), 96u);
  EXPECT_EQ(limit.failures_in_a_row(), 0);
}

// Good passes raise the limit by a quarter every kGrowAfter, never above the ceiling; a failure
// restarts the count.
TEST(ActiveLimitTest, GoodPassesRaiseTheLimitSlowlyUpToTheCeiling) {
  ActiveLimit limit(10);
  EXPECT_EQ(limit.OutOfMemory(8), 4u);
  EXPECT_EQ(limit.limit(), 4u);
  for (int k = 1; k < ActiveLimit::kGrowAfter; ++k) limit.GoodPass();
  EXPECT_EQ(limit.limit(), 4u);
  EXPECT_EQ(limit.OutOfMemory(4), 2u);  // one short of growing: the count starts again
  for (int k = 1; k < ActiveLimit::kGrowAfter; ++k) limit.GoodPass();
  EXPECT_EQ(limit.limit(), 2u);
  limit.GoodPass();
  EXPECT_EQ(limit.limit(), 3u);  // at least one more
  for (int round = 0; round < 20; ++round)
    for (int k = 0; k < ActiveLimit::kGrowAfter; ++k) limit.GoodPass();
  EXPECT_EQ(limit.limit(), 10u);
}

}  // namespace
}  // namespace marlaas::rollout

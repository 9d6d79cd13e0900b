// The rule by which a rollout replica takes a broadcast adapter instead of reading the store
// (procs/rollout/adapter_inbox.h), and what a build without NCCL says when asked for one.
#include "procs/rollout/adapter_inbox.h"

#include <gtest/gtest.h>

namespace marlaas::rollout {
namespace {

TEST(AdapterInboxTest, ABroadcastIsUsedOnlyWhenItIsExactlyTheStoresVersionOfTheSlotsTenant) {
  InboxEntry e{/*generation=*/4, /*version=*/9, torch::randn({120})};
  EXPECT_TRUE(InboxEntryMatches(e, 4, 9, 120));
  EXPECT_FALSE(InboxEntryMatches(e, 4, 10, 120));  // the store is ahead: read it
  EXPECT_FALSE(InboxEntryMatches(e, 4, 8, 120));   // the store has not published it yet
  EXPECT_FALSE(InboxEntryMatches(e, 5, 9, 120));   // the slot went to another tenant
  EXPECT_FALSE(InboxEntryMatches(e, 4, 9, 96));    // another layout
  EXPECT_FALSE(InboxEntryMatches(InboxEntry{4, 9, at::Tensor()}, 4, 9, 120));  // taken already
}

TEST(AdapterInboxTest, WithoutAGroupToJoinStartFailsWithAReason) {
  // No "nccl" segment for this instance (and, without NCCL, no support at all): a clear error,
  // which the rollout logs before reading every adapter from the store.
  auto inbox = AdapterInbox::Start("no-such-instance-for-inbox-test", 0);
  ASSERT_FALSE(inbox.ok());
  EXPECT_FALSE(inbox.status().message().empty());
}

}  // namespace
}  // namespace marlaas::rollout

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
  // The reason names what is missing, whichever it is in this build and on this machine: NCCL
  // support (a build without it), CUDA device 0 (no GPU), or the instance's "nccl" segment.
  const Status& st = inbox.status();
  const std::string& m = st.message();
  const bool no_support = st.code() == StatusCode::kFailedPrecondition &&
                          m.find("needs a build with CUDA and NCCL") != std::string::npos;
  const bool no_device = st.code() == StatusCode::kFailedPrecondition &&
                         m.find("no CUDA device 0") != std::string::npos;
  const bool no_segment = st.code() == StatusCode::kNotFound &&
                          m.find("no-such-instance-for-inbox-test") != std::string::npos &&
                          m.find("nccl") != std::string::npos &&
                          m.find("does not exist") != std::string::npos;
  EXPECT_TRUE(no_support || no_device || no_segment) << st.ToString();
}

}  // namespace
}  // namespace marlaas::rollout

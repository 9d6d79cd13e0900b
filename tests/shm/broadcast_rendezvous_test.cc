// The broadcast group's shared-memory rendezvous (no GPU needed): members register across
// processes and a dead one drops out, the root role cannot be taken from a live root, rounds and
// announcements reach members in order, and a member that falls behind the ring is told so.
#include "shm/broadcast_rendezvous.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "shm/broadcast_strikes.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::ChildGuard;
using testing::ScopedInstance;

TEST(BroadcastRendezvousTest, MembersRegisterAcrossProcessesAndTheDeadDropOut) {
  ScopedInstance inst;
  auto root = ShmRendezvous::Create(inst.name());
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  // A member process registers, reports its slot, and stays until killed (by the guard if the
  // test fails first).
  ChildGuard children;
  const pid_t member = children.Fork([&] {
    auto r = ShmRendezvous::Attach(inst.name());
    if (!r.ok()) return 1;
    auto slot = r->Register();
    if (!slot.ok()) return 2;
    const char c = char('0' + *slot);
    if (write(pipe_fds[1], &c, 1) != 1) return 3;
    for (;;) pause();
  });
  close(pipe_fds[1]);  // only the child's write end is left: one that fails ends the read
  char c = 0;
  ASSERT_EQ(read(pipe_fds[0], &c, 1), 1);
  close(pipe_fds[0]);
  const int slot = c - '0';
  auto live = root->LiveMembers();
  EXPECT_NE(live[size_t(slot)], 0u);
  // This process registers too, and gets another slot; registering again returns the same one.
  auto mine = root->Register();
  ASSERT_TRUE(mine.ok());
  EXPECT_NE(*mine, slot);
  EXPECT_EQ(*root->Register(), *mine);
  children.Kill(member);
  live = root->LiveMembers();
  EXPECT_EQ(live[size_t(slot)], 0u) << "a killed member still counts as live";
  EXPECT_NE(live[size_t(*mine)], 0u);
  root->Unregister(*mine);
  EXPECT_EQ(root->LiveMembers()[size_t(*mine)], 0u);
}

TEST(BroadcastRendezvousTest, ALiveRootKeepsItsRoleAndADeadOnesIsTakenOver) {
  ScopedInstance inst;
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  ChildGuard children;
  const pid_t first = children.Fork([&] {
    auto r = ShmRendezvous::Create(inst.name());
    if (!r.ok() || !r->ClaimRoot().ok()) return 1;
    const char c = 'r';
    if (write(pipe_fds[1], &c, 1) != 1) return 2;
    for (;;) pause();
  });
  close(pipe_fds[1]);  // only the child's write end is left: one that fails ends the read
  char c = 0;
  ASSERT_EQ(read(pipe_fds[0], &c, 1), 1);
  close(pipe_fds[0]);
  auto r = ShmRendezvous::Attach(inst.name());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->RootAlive());  // the child's claim
  const Status taken = r->ClaimRoot();
  EXPECT_EQ(taken.code(), StatusCode::kAlreadyExists) << taken.ToString();
  children.Kill(first);
  EXPECT_FALSE(r->RootAlive());
  EXPECT_TRUE(r->ClaimRoot().ok());
  EXPECT_TRUE(r->RootAlive());
}

TEST(BroadcastRendezvousTest, RoundsAndAnnouncementsArriveInOrderAndOverrunIsReported) {
  ScopedInstance inst;
  auto root = ShmRendezvous::Create(inst.name());
  ASSERT_TRUE(root.ok());
  auto member = ShmRendezvous::Attach(inst.name());
  ASSERT_TRUE(member.ok());
  EXPECT_EQ(member->LatestRound()->generation, 0u);
  BroadcastRound round;
  round.generation = 3;
  round.world_size = 2;
  round.rank_of.fill(-1);
  round.rank_of[5] = 1;
  round.id[0] = 0x42;
  round.first_seq = root->NextSeq();
  ASSERT_TRUE(root->PublishRound(round).ok());
  auto seen = member->LatestRound();
  ASSERT_TRUE(seen.ok());
  EXPECT_EQ(seen->generation, 3u);
  EXPECT_EQ(seen->rank_of[5], 1);
  EXPECT_EQ(seen->id[0], 0x42);
  EXPECT_EQ(seen->first_seq, 1u);

  // Nothing announced yet: a bounded wait, then kUnavailable.
  auto none = member->AnnouncementAt(1, Deadline::AfterMs(20));
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  for (uint64_t v = 1; v <= 3; ++v) {
    BroadcastAnnouncement a;
    a.generation = 3;
    a.slot = int(v);
    a.version = 10 * v;
    a.bytes = 1000 + v;
    auto seq = root->Announce(a);
    ASSERT_TRUE(seq.ok());
    EXPECT_EQ(*seq, v);
  }
  for (uint64_t s = 1; s <= 3; ++s) {
    auto a = member->AnnouncementAt(s, Deadline::AfterMs(100));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_EQ(a->seq, s);
    EXPECT_EQ(a->version, 10 * s);
    EXPECT_EQ(a->bytes, 1000 + s);
  }
  // The root runs a whole ring ahead: announcement 1 is gone and the member is told so.
  for (int i = 0; i < kAnnouncementRing; ++i) ASSERT_TRUE(root->Announce({}).ok());
  auto lost = member->AnnouncementAt(1, Deadline::AfterMs(100));
  EXPECT_EQ(lost.status().code(), StatusCode::kResourceExhausted) << lost.status().ToString();
  EXPECT_EQ(root->NextSeq(), 4u + kAnnouncementRing);
}

// What a member records — the generation it left, its progress (the generation it began to join,
// the announcement it entered) — reaches the root, and a fresh registration has recorded nothing.
TEST(BroadcastRendezvousTest, WhatAMemberRecordsIsSeenByTheRootUntilItRegistersAgain) {
  ScopedInstance inst;
  auto root = ShmRendezvous::Create(inst.name());
  ASSERT_TRUE(root.ok());
  auto member = ShmRendezvous::Attach(inst.name());
  ASSERT_TRUE(member.ok());
  auto slot = member->Register();
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(root->LeftGeneration(*slot), 0u);
  EXPECT_EQ(root->ProgressOf(*slot).generation, 0u);
  member->Leave(*slot, 7);
  member->Progress(*slot, BroadcastProgress{4, 0});
  member->Progress(*slot, BroadcastProgress{4, 17});
  EXPECT_EQ(root->LeftGeneration(*slot), 7u);
  EXPECT_EQ(root->ProgressOf(*slot).generation, 4u);
  EXPECT_EQ(root->ProgressOf(*slot).seq, 17u);
  EXPECT_EQ(root->LeftGeneration(-1), 0u);  // out of range: none
  EXPECT_EQ(root->ProgressOf(kMaxBroadcastMembers).generation, 0u);
  member->Unregister(*slot);
  auto again = member->Register();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(root->LeftGeneration(*again), 0u);
  EXPECT_EQ(root->ProgressOf(*again).generation, 0u);
  EXPECT_EQ(root->ProgressOf(*again).seq, 0u);
}

// Silent: never began to join the generation being formed (seq 0), or never entered the
// broadcast (seq) the group waited in.
TEST(BroadcastStrikesTest, AMemberIsSilentOnlyWhereItNeverGotToTheStep) {
  EXPECT_TRUE(BroadcastStrikes::Silent({3, 9}, 4, 0));   // still in the old generation
  EXPECT_FALSE(BroadcastStrikes::Silent({4, 0}, 4, 0));  // began to join
  EXPECT_TRUE(BroadcastStrikes::Silent({4, 0}, 4, 12));  // joined, never entered seq 12
  EXPECT_TRUE(BroadcastStrikes::Silent({4, 11}, 4, 12));
  EXPECT_FALSE(BroadcastStrikes::Silent({4, 12}, 4, 12));  // entered it: someone else hung
  EXPECT_TRUE(BroadcastStrikes::Silent({}, 1, 0));         // registered, never anything
}

// kMaxStrikes failed generations in a row leave a member out; one generation got through starts
// its count again; another process in the slot is eligible at once; others are not affected.
TEST(BroadcastStrikesTest, AMemberFailingGenerationsInARowIsLeftOutUntilANewProcessTakesItsSlot) {
  BroadcastStrikes s;
  BroadcastStrikes::Slots members{};
  members[0] = 100;  // fails every generation
  members[1] = 200;  // fails twice, gets through once, fails twice more
  members[2] = 300;  // never fails
  auto end = [&](bool f0, bool f1) {
    BroadcastStrikes::Flags failed{};
    failed[0] = f0;
    failed[1] = f1;
    return s.EndGeneration(members, failed);
  };
  EXPECT_TRUE(end(true, true).empty());
  EXPECT_TRUE(end(true, true).empty());
  EXPECT_EQ(end(true, false), std::vector<int>{0});  // the third in a row
  EXPECT_TRUE(end(true, true).empty());              // reported once
  EXPECT_TRUE(end(false, true).empty());             // 200: two in a row again, not three
  BroadcastStrikes::Slots eligible = s.Eligible(members);
  EXPECT_EQ(eligible[0], 0u);
  EXPECT_EQ(eligible[1], 200u);
  EXPECT_EQ(eligible[2], 300u);
  members[0] = 101;  // a restarted process in slot 0
  eligible = s.Eligible(members);
  EXPECT_EQ(eligible[0], 101u);
  EXPECT_TRUE(end(true, false).empty());  // its count starts from 0
  EXPECT_TRUE(end(true, false).empty());
  EXPECT_EQ(end(true, false), std::vector<int>{0});
}

}  // namespace
}  // namespace marlaas

// Segments: creation, attach checks (kind, layout version, instance) and stale-segment cleanup.
#include "shm/segment.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "shm/stale_segments.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::ForkChild;
using testing::ScopedInstance;
using testing::WaitChild;
using testing::WaitChildFor;

bool Contains(const Status& st, const std::string& needle) {
  return st.message().find(needle) != std::string::npos;
}

TEST(SegmentTest, AttachSeesWhatCreateInitialised) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "s"};
  auto created = Segment::Create(name, SegmentKind::kTest, 3, 100, [](void* p, size_t n) {
    std::memset(p, 0x5a, n);
    return Status::Ok();
  });
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  auto attached = Segment::Attach(name, SegmentKind::kTest, 3);
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_EQ(attached->payload_bytes(), 100u);
  EXPECT_EQ(static_cast<unsigned char*>(attached->payload())[99], 0x5a);
  EXPECT_EQ(attached->creator().pid, getpid());
}

TEST(SegmentTest, CreatingAnExistingSegmentFails) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "s"};
  auto a = Segment::Create(name, SegmentKind::kTest, 1, 64);
  ASSERT_TRUE(a.ok());
  auto b = Segment::Create(name, SegmentKind::kTest, 1, 64);
  EXPECT_EQ(b.status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(Contains(b.status(), "marlaas clean"));
}

TEST(SegmentTest, AttachWithAnotherLayoutVersionFailsNamingBothVersions) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "s"};
  auto a = Segment::Create(name, SegmentKind::kTest, 1, 64);
  ASSERT_TRUE(a.ok());
  auto b = Segment::Attach(name, SegmentKind::kTest, 2);
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(b.status(), "layout version 1 but this binary uses version 2"))
      << b.status().message();
}

TEST(SegmentTest, AttachAsAnotherKindFails) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "s"};
  auto a = Segment::Create(name, SegmentKind::kTest, 1, 64);
  ASSERT_TRUE(a.ok());
  auto b = Segment::Attach(name, SegmentKind::kRing, 1);
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(b.status(), "is a test segment, not a ring segment"))
      << b.status().message();
}

TEST(SegmentTest, AttachingAnotherInstancesSegmentFails) {
  ScopedInstance mine, theirs;
  const SegmentName their_name{theirs.name(), "s"};
  auto a = Segment::Create(their_name, SegmentKind::kTest, 1, 64);
  ASSERT_TRUE(a.ok());
  // The same object reached under our instance's name (a copied or renamed /dev/shm entry).
  const SegmentName my_name{mine.name(), "s"};
  ASSERT_EQ(::link(("/dev/shm/" + their_name.SystemName()).c_str(),
                   ("/dev/shm/" + my_name.SystemName()).c_str()),
            0);
  auto b = Segment::Attach(my_name, SegmentKind::kTest, 1);
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(b.status(), "belongs to service instance '" + theirs.name() + "'"))
      << b.status().message();
}

TEST(SegmentTest, AttachingAMissingSegmentNamesTheInstance) {
  auto b = Segment::Attach({"nosuchinstance", "s"}, SegmentKind::kTest, 1);
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(b.status(), "is instance 'nosuchinstance' running?"));
}

TEST(SegmentTest, BadNamesAreRejected) {
  EXPECT_EQ(Segment::Create({"a/b", "s"}, SegmentKind::kTest, 1, 8).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Segment::Create({"ok", "../x"}, SegmentKind::kTest, 1, 8).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Segment::Create({"", "s"}, SegmentKind::kTest, 1, 8).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(SegmentTest, StaleSegmentsOfExitedCreatorsAreRemovedLiveOnesKept) {
  ScopedInstance inst;
  auto live = Segment::Create({inst.name(), "live"}, SegmentKind::kTest, 1, 64);
  ASSERT_TRUE(live.ok());
  pid_t child = ForkChild([&]() -> int {
    auto s = Segment::Create({inst.name(), "orphan"}, SegmentKind::kTest, 1, 64);
    return s.ok() ? 0 : 1;  // exits without removing it, as a crashed service would
  });
  auto e = WaitChild(child);
  ASSERT_TRUE(e.exited && e.code == 0);
  auto before = ListSegments(inst.name());
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->size(), 2u);
  auto removed = RemoveStaleSegments(inst.name());
  ASSERT_TRUE(removed.ok());
  ASSERT_EQ(removed->size(), 1u);
  EXPECT_EQ((*removed)[0].system_name, "marlaas." + inst.name() + ".orphan");
  EXPECT_EQ((*removed)[0].creator.pid, child);
  EXPECT_EQ(Segment::Attach({inst.name(), "orphan"}, SegmentKind::kTest, 1).status().code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(Segment::Attach({inst.name(), "live"}, SegmentKind::kTest, 1).ok());
}

// A /dev/shm without room for a segment: creating it fails by name (it was made, and the first
// write past what /dev/shm held killed the writer with SIGBUS), and nothing is left behind. A
// segment's later part reserved on its own fails the same way.
TEST(SegmentTest, ASegmentWithoutRoomInDevShmIsRefusedByName) {
  ScopedInstance inst;
  auto* message = testing::MapShared<std::array<char, 512>>();
  const pid_t child = ForkChild([&]() -> int {
    if (!testing::UsePrivateDevShm("1m")) return 77;
    const auto note = [&](const Status& st) {
      std::snprintf(message->data(), message->size(), "%s", st.ToString().c_str());
    };
    auto big = Segment::Create({inst.name(), "big"}, SegmentKind::kTest, 1, 4 << 20);
    if (big.ok()) return 1;
    note(big.status());
    if (big.status().code() != StatusCode::kResourceExhausted) return 2;
    if (!Contains(big.status(),
                  "/dev/shm has no room for 5 MiB of segment /marlaas." + inst.name() + ".big (") ||
        !Contains(big.status(), " MiB free there): make /dev/shm larger"))
      return 3;
    if (Segment::Attach({inst.name(), "big"}, SegmentKind::kTest, 1).status().code() !=
        StatusCode::kNotFound)
      return 4;  // left behind
    // Half reserved now, the rest when it is needed: the rest does not fit.
    auto part =
        Segment::Create({inst.name(), "part"}, SegmentKind::kTest, 1, 2 << 20, nullptr, 512 << 10);
    if (!part.ok()) return note(part.status()), 5;
    if (Status st = part->Reserve(0, 256 << 10); !st.ok()) return note(st), 6;  // already had
    const Status rest = part->Reserve(512 << 10, 1536 << 10);
    note(rest);
    if (rest.code() != StatusCode::kResourceExhausted || !Contains(rest, "/dev/shm has no room"))
      return 7;
    if (part->Reserve(1 << 20, 2 << 20).code() != StatusCode::kInvalidArgument) return 8;
    return 0;
  });
  const auto e = WaitChildFor(child, 60);
  if (e.exited && e.code == 77) GTEST_SKIP() << "no mount namespace here (not root)";
  EXPECT_TRUE(e.exited && e.code == 0)
      << "exit " << e.code << " signal " << e.signal << ": " << message->data();
  testing::UnmapShared(message);
}

}  // namespace
}  // namespace marlaas

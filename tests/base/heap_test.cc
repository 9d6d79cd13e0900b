// KeepFreedHeapMemory: a second round of the same allocations does not fault its memory in again
// (and, without it, glibc's defaults do: the test would pass with a no-op otherwise).
#include "base/heap.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstring>
#include <vector>

#include "tests/test_util.h"

namespace marlaas {
namespace {

long MinorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// A step's worth of activations: 256 blocks of 64 KiB (16 MiB, each below glibc's default mmap
// threshold, so from the heap), written, then freed newest first so that they join the heap's
// top. Returns the minor page faults of the round.
long OneRound() {
  const long before = MinorFaults();
  std::vector<char*> blocks;
  for (int i = 0; i < 256; ++i) {
    blocks.push_back(static_cast<char*>(std::malloc(64 << 10)));
    std::memset(blocks.back(), i, 64 << 10);
  }
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
  return MinorFaults() - before;
}

// In a child: mallopt is process-wide and gtest's own allocations would blur the counts.
// Exits 0 when the second round faulted fewer than `max_faults` pages, 1 otherwise.
int SecondRoundFaults(bool keep, long max_faults) {
  if (keep && !KeepFreedHeapMemory().ok()) return 2;
  OneRound();
  return OneRound() < max_faults ? 0 : 1;
}

TEST(HeapTest, KeptMemoryIsNotFaultedInAgain) {
  // 16 MiB is 4,096 pages: kept, the second round touches pages already mapped.
  const testing::ChildExit kept = testing::WaitChild(
      testing::ForkChild([] { return SecondRoundFaults(/*keep=*/true, /*max_faults=*/256); }));
  ASSERT_TRUE(kept.exited);
  EXPECT_EQ(kept.code, 0) << "the second round faulted its memory in again";
}

TEST(HeapTest, WithoutItTheFreedTopIsTrimmedAndFaultedAgain) {
  // The behaviour the setting exists for: with glibc's defaults the second round faults most of
  // its 4,096 pages again.
  const testing::ChildExit plain = testing::WaitChild(
      testing::ForkChild([] { return SecondRoundFaults(/*keep=*/false, /*max_faults=*/2048); }));
  ASSERT_TRUE(plain.exited);
  EXPECT_EQ(plain.code, 1) << "glibc's defaults no longer trim the heap: base/heap.h is stale";
}

}  // namespace
}  // namespace marlaas

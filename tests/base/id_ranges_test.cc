// IdRanges against a std::set on random ids (runs, repeats, isolated ids, both ends of the
// range): the same membership and count, ranges that are sorted, disjoint and not adjacent, and
// a round trip through Ranges / FromRanges.
#include "base/id_ranges.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <set>

namespace marlaas {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

void ExpectSame(const IdRanges& got, const std::set<uint64_t>& want) {
  EXPECT_EQ(got.size(), want.size());
  uint64_t covered = 0;
  const auto ranges = got.Ranges();
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto [first, last] = ranges[i];
    ASSERT_LE(first, last);
    if (i > 0) {
      ASSERT_GT(first, ranges[i - 1].second + 1) << "adjacent or overlapping ranges";
    }
    for (uint64_t id = first;; ++id) {
      ASSERT_TRUE(want.count(id)) << id << " is in a range but was never inserted";
      ++covered;
      if (id == last) break;
    }
  }
  EXPECT_EQ(covered, want.size());
}

TEST(IdRangesTest, MatchesASetOnRandomIds) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    IdRanges ids;
    std::set<uint64_t> want;
    for (int i = 0; i < 2000; ++i) {
      uint64_t id;
      switch (rng() % 4) {
        case 0:  // a run of an incarnation's counter
          id = (uint64_t(rng() % 3) << 32) | (rng() % 200);
          break;
        case 1:
          id = rng() % 8;
          break;
        case 2:
          id = kMax - rng() % 8;
          break;
        default:
          id = rng();
      }
      EXPECT_EQ(ids.Insert(id), want.insert(id).second) << id;
    }
    ExpectSame(ids, want);
    for (int i = 0; i < 2000; ++i) {
      const uint64_t probe = i % 2 ? (uint64_t(rng() % 3) << 32) | (rng() % 220) : rng() % 10;
      EXPECT_EQ(ids.Contains(probe), want.count(probe) > 0) << probe;
    }
    EXPECT_TRUE(ids.Contains(*want.rbegin()));
    IdRanges back;
    ASSERT_TRUE(back.FromRanges(ids.Ranges()));
    ExpectSame(back, want);
  }
}

TEST(IdRangesTest, ARunOfIdsIsOneRange) {
  IdRanges ids;
  for (uint64_t id = 100; id > 0; --id) ids.Insert(id % 2 ? id : 1000 - id);  // two interleaved
  for (uint64_t id = 0; id < 1000; ++id) ids.Insert(id);
  EXPECT_EQ(ids.Ranges(), (std::vector<std::pair<uint64_t, uint64_t>>{{0, 999}}));
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_FALSE(ids.Insert(500));
}

TEST(IdRangesTest, FromRangesMergesOverlapsInAnyOrderAndRefusesBackwardRanges) {
  IdRanges ids;
  ASSERT_TRUE(ids.FromRanges({{10, 20}, {0, 3}, {4, 5}, {15, 30}, {kMax - 1, kMax}, {kMax, kMax}}));
  EXPECT_EQ(ids.Ranges(),
            (std::vector<std::pair<uint64_t, uint64_t>>{{0, 5}, {10, 30}, {kMax - 1, kMax}}));
  EXPECT_EQ(ids.size(), 6u + 21u + 2u);
  EXPECT_TRUE(ids.Contains(kMax));
  EXPECT_FALSE(ids.Contains(6));
  EXPECT_FALSE(ids.FromRanges({{5, 4}}));
  EXPECT_TRUE(ids.empty());
}

}  // namespace
}  // namespace marlaas

// UsableHostMemory: the smaller of the RAM and the cgroup limits above this process; the parsers
// of /proc/meminfo and of a cgroup limit file.
#include "base/host_memory.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace marlaas {
namespace {

TEST(HostMemoryTest, MemTotalIsReadInKibibytes) {
  EXPECT_EQ(MemTotalBytes("MemFree:  100 kB\nMemTotal:       24683772 kB\nSwapTotal: 0 kB\n"),
            uint64_t(24683772) * 1024);
  EXPECT_EQ(MemTotalBytes("MemFree: 100 kB\n"), std::nullopt);
  EXPECT_EQ(MemTotalBytes("MemTotal: lots\n"), std::nullopt);
  EXPECT_EQ(MemTotalBytes("MemTotal: 5 MB\n"), std::nullopt);
}

TEST(HostMemoryTest, ACgroupLimitIsBytesAndMaxOrUnlimitedIsNone) {
  EXPECT_EQ(CgroupLimitBytes("8589934592\n"), uint64_t(8) << 30);
  EXPECT_EQ(CgroupLimitBytes("max\n"), std::nullopt);
  EXPECT_EQ(CgroupLimitBytes("9223372036854771712\n"), std::nullopt);  // v1 "unlimited"
  EXPECT_EQ(CgroupLimitBytes(""), std::nullopt);                       // no such file
  EXPECT_EQ(CgroupLimitBytes("-1\n"), std::nullopt);
  EXPECT_EQ(CgroupLimitBytes("0\n"), std::nullopt);
}

TEST(HostMemoryTest, ThisHostsMemoryIsAtMostItsRam) {
  std::ifstream f("/proc/meminfo");
  std::stringstream s;
  s << f.rdbuf();
  const auto ram = MemTotalBytes(s.str());
  ASSERT_TRUE(ram.has_value()) << "no MemTotal in /proc/meminfo";
  const HostMemory m = UsableHostMemory();
  EXPECT_GT(m.bytes, uint64_t(0));
  EXPECT_LE(m.bytes, *ram);
  EXPECT_EQ(m.limited_by == "RAM", m.bytes == *ram) << m.limited_by;
  std::printf("usable: %llu MiB (%s)\n", (unsigned long long)(m.bytes >> 20), m.limited_by.c_str());
}

}  // namespace
}  // namespace marlaas

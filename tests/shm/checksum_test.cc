// The record checksum against its definition, and its sensitivity to any single-byte change.
#include "shm/checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace marlaas {
namespace {

TEST(ChecksumTest, CopyingVariantCopiesAndAgreesWithPlainChecksum) {
  std::mt19937_64 rng(1);
  for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 200, 4096, 100003}) {
    std::vector<unsigned char> src(n), dst(n + 1, 0xcc);
    for (auto& b : src) b = (unsigned char)rng();
    const uint64_t a = Checksum64(src.data(), n, 42);
    const uint64_t b = CopyWithChecksum64(dst.data(), src.data(), n, 42);
    EXPECT_EQ(a, b) << n;
    EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin())) << n;
    EXPECT_EQ(dst[n], 0xcc) << "wrote past the end for n=" << n;
  }
}

TEST(ChecksumTest, EverySingleByteFlipChangesTheChecksum) {
  std::mt19937_64 rng(2);
  for (size_t n : {1, 13, 64, 77, 300}) {
    std::vector<unsigned char> buf(n);
    for (auto& b : buf) b = (unsigned char)rng();
    const uint64_t base = Checksum64(buf.data(), n, 7);
    for (size_t i = 0; i < n; ++i) {
      for (unsigned bit = 0; bit < 8; bit += 3) {
        buf[i] ^= (1u << bit);
        EXPECT_NE(Checksum64(buf.data(), n, 7), base) << "n=" << n << " byte " << i;
        buf[i] ^= (1u << bit);
      }
    }
  }
}

TEST(ChecksumTest, SeedLengthAndWordOrderMatter) {
  std::vector<unsigned char> buf(128);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = (unsigned char)(i * 37 + 1);
  const uint64_t base = Checksum64(buf.data(), buf.size(), 0);
  EXPECT_NE(Checksum64(buf.data(), buf.size(), 1), base);
  EXPECT_NE(Checksum64(buf.data(), buf.size() - 1, 0), base);
  std::vector<unsigned char> swapped = buf;  // swap two 8-byte words of the same lane
  std::swap_ranges(swapped.begin(), swapped.begin() + 8, swapped.begin() + 64);
  EXPECT_NE(Checksum64(swapped.data(), swapped.size(), 0), base);
  std::vector<unsigned char> zeros(64, 0);  // zero data still depends on the length
  EXPECT_NE(Checksum64(zeros.data(), 64, 0), Checksum64(zeros.data(), 56, 0));
}

}  // namespace
}  // namespace marlaas

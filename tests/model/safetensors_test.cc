// Our safetensors reader and writer: round trips, and hostile files rejected with a reason.
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <random>

#include "base/file_util.h"

namespace marlaas::model {
namespace {

std::string TempPath(const std::string& tag) {
  return "/tmp/marlaas_st_" + std::to_string(getpid()) + "_" + tag + ".safetensors";
}

// A file made of an 8-byte length, `header` and `data`.
std::string Build(const std::string& header, const std::string& data, int64_t claimed_len = -1) {
  std::string out(8, '\0');
  const uint64_t n = claimed_len >= 0 ? uint64_t(claimed_len) : header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

Status OpenBytes(const std::string& bytes, const std::string& tag) {
  const std::string path = TempPath(tag);
  EXPECT_TRUE(WriteFileAtomically(path, bytes).ok());
  auto f = SafetensorsFile::Open(path);
  ::unlink(path.c_str());
  return f.ok() ? Status::Ok() : f.status();
}

TEST(SafetensorsTest, WriteThenReadRoundTripsEveryDtypeAndMetadata) {
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x4049};
  std::vector<int64_t> i64 = {1, -2, 1LL << 40};
  std::map<std::string, TensorView> tensors;
  tensors["a.weight"] = {
      DType::kF32, {2, 3}, reinterpret_cast<const unsigned char*>(f32.data()), 24};
  tensors["b"] = {DType::kBF16, {3}, reinterpret_cast<const unsigned char*>(bf16.data()), 6};
  tensors["ids"] = {DType::kI64, {3, 1}, reinterpret_cast<const unsigned char*>(i64.data()), 24};
  tensors["empty"] = {DType::kF16, {0, 4}, nullptr, 0};
  const std::string path = TempPath("rt");
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->names(), (std::vector<std::string>{"a.weight", "b", "empty", "ids"}));
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  for (const auto& [name, want] : tensors) {
    auto got = (*f)->Get(name);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->dtype, want.dtype) << name;
    EXPECT_EQ(got->shape, want.shape) << name;
    ASSERT_EQ(got->bytes, want.bytes) << name;
    if (want.bytes) {
      EXPECT_EQ(std::memcmp(got->data, want.data, want.bytes), 0) << name;
    }
  }
  auto a = (*f)->Get("a.weight");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data) % 8, 0u) << "f32 data should be aligned";
  EXPECT_EQ((*f)->Get("nope").status().code(), StatusCode::kNotFound);
  ::unlink(path.c_str());
}

TEST(SafetensorsTest, TruncatedAndOversizedFilesAreRejectedWithAReason) {
  const std::string header = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string good = Build(header, std::string(8, 'x'));
  ASSERT_TRUE(OpenBytes(good, "good").ok());
  EXPECT_NE(OpenBytes(good.substr(0, 5), "short").message().find("truncated"), std::string::npos);
  EXPECT_NE(OpenBytes(good.substr(0, 30), "cut").message().find("truncated"), std::string::npos);
  // Data cut short: the tensor's offsets now point past the end.
  EXPECT_NE(OpenBytes(good.substr(0, good.size() - 3), "data").message().find("outside"),
            std::string::npos);
  EXPECT_NE(OpenBytes(Build(header, "", int64_t(1) << 40), "huge").message().find("exceeds"),
            std::string::npos);
}

TEST(SafetensorsTest, MaliciousHeadersAreRejectedWithAReason) {
  const std::string d(64, 'x');
  struct Case {
    const char* header;
    const char* reason;
  } cases[] = {
      {R"(not json)", "not valid JSON"},
      {R"([1,2,3])", "not a JSON object"},
      {R"({"t":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}})", "unknown dtype"},
      {R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "non-negative integer"},
      {R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", "non-negative integer"},
      {R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
       "overflows"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "outside"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,9999]}})", "outside"},
      {R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "need 12"},
      // numel * dtype size wraps to the bytes given (2^62 * 4 = 0, (2^61 + 1) * 8 = 8 mod 2^64).
      {R"({"t":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})",
       "need 4611686018427387904 x 4"},
      {R"({"t":{"dtype":"F64","shape":[2305843009213693953],"data_offsets":[0,8]}})",
       "need 2305843009213693953 x 8"},
      {R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", "data_offsets pair"},
      {R"({"t":{"dtype":"F32","shape":[2]}})", "data_offsets pair"},
      {R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"u":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
       "overlap"},
      {R"({"t":"x"})", "not an object"},
      {R"({"__metadata__":{"k":1}})", "not a string"},
  };
  for (const Case& c : cases) {
    Status st = OpenBytes(Build(c.header, d), "mal");
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << c.header;
    EXPECT_NE(st.message().find(c.reason), std::string::npos) << c.header << " -> " << st.message();
  }
}

// Property: random byte flips and truncations of a valid file never crash the reader; every
// tensor it does accept lies inside the data area.
TEST(SafetensorsTest, FuzzedFilesNeverCrashAndAcceptedTensorsStayInBounds) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[4],"data_offsets":[16,24]}})";
  const std::string good = Build(header, std::string(24, 'z'));
  std::mt19937 rng(5);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = good;
    const int flips = 1 + int(rng() % 4);
    for (int i = 0; i < flips; ++i) bytes[rng() % bytes.size()] = char(rng());
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    std::map<std::string, TensorView> tensors;
    std::map<std::string, std::string> meta;
    if (bytes.size() < 8) continue;
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    if (n > bytes.size() - 8) continue;  // Open rejects these before parsing (tested above)
    const uint64_t data = bytes.size() - 8 - n;
    if (SafetensorsFile::ParseHeader(bytes.substr(8, n), data, &tensors, &meta).ok()) {
      ++accepted;
      for (const auto& [name, v] : tensors) {
        const uint64_t begin = uintptr_t(v.data);
        ASSERT_LE(begin + v.bytes, data) << name;
      }
    }
  }
  EXPECT_GT(accepted, 0);  // some flips land in harmless places (e.g. data bytes)
}

}  // namespace
}  // namespace marlaas::model

// ReadFile: a file's bytes; a missing one is kNotFound; a folder, and a FIFO with no writer, are
// refused by name without waiting (a dataset path naming a FIFO once blocked serve's admission).
#include "base/file_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>

#include "tests/test_util.h"

namespace marlaas {
namespace {

TEST(FileUtilTest, ReadFileReadsFilesAndRefusesFoldersAndFifosWithoutWaiting) {
  const testing::ScopedTempDir tmp("read-file");
  const std::string file = tmp.path() + "/data.jsonl", fifo = tmp.path() + "/fifo";
  std::ofstream(file, std::ios::binary) << std::string("a\0b\n", 4);
  auto text = ReadFile(file);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, std::string("a\0b\n", 4));

  auto missing = ReadFile(tmp.path() + "/none");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  auto folder = ReadFile(tmp.path());
  EXPECT_EQ(folder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(folder.status().message().find(tmp.path() + " is a folder"), std::string::npos)
      << folder.status().message();

  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // In a child: an open that waited for a writer shows as a child killed at the bound.
  const pid_t child = testing::ForkChild([&] {
    auto r = ReadFile(fifo);
    if (r.ok()) return 1;
    if (r.status().code() != StatusCode::kInvalidArgument) return 2;
    return r.status().message().find(fifo + " is not a regular file") == std::string::npos ? 3 : 0;
  });
  const testing::ChildExit e = testing::WaitChildFor(child, 20);
  EXPECT_FALSE(e.timed_out) << "ReadFile waited for a writer of the FIFO";
  EXPECT_TRUE(e.exited && e.code == 0) << "code " << e.code;
}

// What a user names on the command line may be a pipe (`<(envsubst < job.json)`): read, up to
// the limit (/dev/zero ends with the limit named), whichever of it and its writer opens first; a
// folder is still refused, and a pipe is never waited on for ever.
TEST(FileUtilTest, ReadUserFileReadsPipesUpToItsLimit) {
  const testing::ScopedTempDir tmp("read-user-file");
  const std::string fifo = tmp.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const pid_t writer = testing::ForkChild([&] {
    std::ofstream(fifo) << "{\"tenant\": \"a\"}";
    return 0;
  });
  auto text = ReadUserFile(fifo, 1024);
  EXPECT_TRUE(testing::WaitChildFor(writer, 20).exited);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "{\"tenant\": \"a\"}");
  auto zeros = ReadUserFile("/dev/zero", 100000);
  EXPECT_EQ(zeros.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(zeros.status().message().find("/dev/zero is a device that gave more than the 100000 "
                                          "bytes allowed"),
            std::string::npos)
      << zeros.status().ToString();
  // A regular file past the limit is named by its size.
  const std::string big = tmp.path() + "/big.json";
  std::ofstream(big) << std::string(2000, ' ');
  auto large = ReadUserFile(big, 1024);
  EXPECT_EQ(large.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(large.status().message().find(big + " is larger than the 1024 bytes allowed"),
            std::string::npos)
      << large.status().ToString();
  EXPECT_EQ(ReadUserFile(tmp.path(), 1024).status().code(), StatusCode::kInvalidArgument);
  // A FIFO that no process opens is refused after the quiet time (it was waited for for ever),
  // and one whose writer closes it without writing at once.
  const auto t0 = std::chrono::steady_clock::now();
  auto nobody = ReadUserFile(fifo, 1024, 300);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(nobody.status().code(), StatusCode::kTimeout) << nobody.status().ToString();
  EXPECT_NE(nobody.status().message().find("no process wrote to in 300 ms"), std::string::npos);
  const pid_t closer = testing::ForkChild([&] {
    std::ofstream{fifo};
    return 0;
  });
  auto empty = ReadUserFile(fifo, 1024, 20000);
  EXPECT_TRUE(testing::WaitChildFor(closer, 20).exited);
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument) << empty.status().ToString();
  EXPECT_NE(empty.status().message().find("is a pipe that gave nothing"), std::string::npos);
}

// Results are written as a new file renamed over the old one: over a device or a pipe that
// replaced it (`--json /dev/null`, run as root, replaced /dev/null with a JSON file). Such a
// target is refused before any work and at the write, and is left as it was.
TEST(FileUtilTest, AnOutputThatIsNotARegularFileIsRefusedAndLeftAsItWas) {
  const testing::ScopedTempDir tmp("file-util-out");
  const std::string fifo = tmp.path() + "/fifo", file = tmp.path() + "/out.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Status st = WriteFileAtomically(fifo, "{}");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(fifo + " is a pipe, not a file"), std::string::npos) << st.ToString();
  struct stat s {};
  ASSERT_EQ(::stat(fifo.c_str(), &s), 0);
  EXPECT_TRUE(S_ISFIFO(s.st_mode));
  st = CheckOutputFile("--json", fifo);
  EXPECT_NE(st.message().find("--json " + fifo + " is a pipe"), std::string::npos) << st.ToString();
  st = CheckOutputFile("--json", "/dev/null");
  EXPECT_NE(st.message().find("--json /dev/null is a device"), std::string::npos) << st.ToString();
  st = CheckOutputFile("--json", tmp.path());
  EXPECT_NE(st.message().find("is a folder"), std::string::npos) << st.ToString();
  st = CheckOutputFile("--json", tmp.path() + "/no/such/out.json");
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(NotARegularFile(file), nullptr);  // nothing there yet
  ASSERT_TRUE(CheckOutputFile("--json", file).ok());
  ASSERT_TRUE(WriteFileAtomically(file, "{}").ok());
  EXPECT_EQ(NotARegularFile(file), nullptr);
  EXPECT_TRUE(WriteFileAtomically(file, "{\"again\":1}").ok());  // a file is replaced, as before
  EXPECT_STREQ(NotARegularFile(tmp.path()), "a folder");
}

// A log past its size becomes its older part (replacing the one before); below it, or absent,
// nothing moves.
TEST(FileUtilTest, ALogPastItsSizeIsRotatedToItsOlderPart) {
  const testing::ScopedTempDir tmp("rotate");
  const std::string log = tmp.path() + "/m.jsonl", older = tmp.path() + "/m.1.jsonl";
  EXPECT_FALSE(*RotateIfLarger(log, older, 10));  // no log yet
  ASSERT_TRUE(WriteFileAtomically(older, "oldest\n").ok());
  ASSERT_TRUE(WriteFileAtomically(log, "12345\n").ok());
  EXPECT_FALSE(*RotateIfLarger(log, older, 10));
  EXPECT_EQ(*ReadFile(log), "12345\n");
  ASSERT_TRUE(WriteFileAtomically(log, "1234567890\n").ok());
  EXPECT_TRUE(*RotateIfLarger(log, older, 10));
  EXPECT_FALSE(FileExists(log));
  EXPECT_EQ(*ReadFile(older), "1234567890\n");
}

}  // namespace
}  // namespace marlaas

// TrimStepsLog: a resumed tenant's steps.jsonl keeps one line per step of its history; the lines
// of steps lost with a dead trainer (and a torn last line) move to steps.lost.jsonl.
#include "procs/trainer/steps_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file_util.h"
#include "procs/common/pipeline.h"
#include "tests/test_util.h"

namespace marlaas::trainer {
namespace {

using ::marlaas::testing::ScopedTempDir;

std::string Step(int n) { return "{\"step\":" + std::to_string(n) + ",\"reward_mean\":0.5}\n"; }

std::string Read(const std::string& path) {
  auto text = ReadFile(path);
  return text.ok() ? *text : "<" + text.status().ToString() + ">";
}

TEST(StepsLogTest, StepsAfterTheCheckpointAndATornLineMoveOutInOrder) {
  ScopedTempDir dir("steps");
  const std::string log = dir.path() + "/steps.jsonl", lost = dir.path() + "/steps.lost.jsonl";
  ASSERT_TRUE(WriteFileAtomically(lost, Step(9)).ok());  // from an earlier crash: kept
  ASSERT_TRUE(WriteFileAtomically(log, Step(1) + Step(2) + Step(3) + Step(4) +
                                           "{\"step\":\"5\"}\n" + Step(5) + "{\"step\":6,\"rew")
                  .ok());
  auto trimmed = TrimStepsLog(dir.path(), 3);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  EXPECT_EQ(trimmed->moved, 4u);
  EXPECT_EQ(Read(log), Step(1) + Step(2) + Step(3));
  EXPECT_EQ(Read(lost), Step(9) + Step(4) + "{\"step\":\"5\"}\n" + Step(5) + "{\"step\":6,\"rew\n");

  // Resumed again at the same step: nothing moves, the file is not rewritten.
  struct stat before {};
  ASSERT_EQ(::stat(log.c_str(), &before), 0);
  trimmed = TrimStepsLog(dir.path(), 3);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  EXPECT_EQ(trimmed->moved, 0u);
  struct stat after {};
  ASSERT_EQ(::stat(log.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);

  // No checkpoint (step 0): every line goes.
  trimmed = TrimStepsLog(dir.path(), 0);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  EXPECT_EQ(trimmed->moved, 3u);
  EXPECT_EQ(Read(log), "");
}

TEST(StepsLogTest, ATenantWithoutALogIsLeftAsItIs) {
  ScopedTempDir dir("steps");
  auto trimmed = TrimStepsLog(dir.path(), 0);
  ASSERT_TRUE(trimmed.ok()) << trimmed.status().ToString();
  EXPECT_EQ(trimmed->moved, 0u);
  EXPECT_FALSE(FileExists(dir.path() + "/steps.jsonl"));
  EXPECT_FALSE(FileExists(dir.path() + "/steps.lost.jsonl"));
}

TEST(StepsLogTest, AnUnreadableLogIsAnErrorNamingItAndIsKept) {
  ScopedTempDir dir("steps");
  const std::string log = dir.path() + "/steps.jsonl";
  ASSERT_EQ(::mkdir(log.c_str(), 0755), 0);  // not a file
  auto trimmed = TrimStepsLog(dir.path(), 0);
  ASSERT_FALSE(trimmed.ok());
  EXPECT_NE(trimmed.status().message().find(log), std::string::npos) << trimmed.status().ToString();
}

// A log that cannot be written for a while (here a folder in its place; a full or read-only
// disk alike) loses no line: they are held and written, in order, with the next line that can be.
// A torn last line a failed write left stays a line of its own. (Lines were dropped: steps.jsonl
// kept gaps of hundreds of steps.)
TEST(AppendLineTest, LinesThatCannotBeWrittenAreHeldAndWrittenInOrderLater) {
  const testing::ScopedTempDir tmp("append-line");
  const std::string log = tmp.path() + "/steps.jsonl";
  pipeline::AppendLine(log, "1");
  ASSERT_EQ(::mkdir((log + ".moved").c_str(), 0755), 0);
  ASSERT_EQ(::rename(log.c_str(), (log + ".moved/steps.jsonl").c_str()), 0);
  ASSERT_EQ(::mkdir(log.c_str(), 0755), 0);  // in the way
  ::testing::internal::CaptureStderr();
  pipeline::AppendLine(log, "2");
  pipeline::AppendLine(log, "3");
  ASSERT_EQ(::rmdir(log.c_str()), 0);
  ASSERT_EQ(::rename((log + ".moved/steps.jsonl").c_str(), log.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(log, *ReadFile(log) + "{\"torn").ok());
  pipeline::AppendLine(log, "4");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(*ReadFile(log), "1\n{\"torn\n2\n3\n4\n");
  EXPECT_NE(err.find("its lines are held"), std::string::npos) << err;
  EXPECT_NE(err.find("the held lines are written"), std::string::npos) << err;
  pipeline::AppendLine(log, "5");  // as before, once caught up
  EXPECT_EQ(*ReadFile(log), "1\n{\"torn\n2\n3\n4\n5\n");
}

}  // namespace
}  // namespace marlaas::trainer

// TrimStepsLog: a resumed tenant's steps.jsonl keeps one line per step of its history; the lines
// of steps lost with a dead trainer (and a torn last line) move to steps.lost.jsonl.
#include "procs/trainer/steps_log.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "base/file_util.h"
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

}  // namespace
}  // namespace marlaas::trainer

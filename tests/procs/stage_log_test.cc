// SetStageLogFile: a stage's log on stderr is rotated past its size into <name>.log.1, with no
// line lost at the switch, and left alone when stderr is not that file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "procs/common/pipeline.h"
#include "tests/test_util.h"

namespace marlaas::pipeline {
namespace {

// Runs `lines` StageLog lines in a child whose stderr is `stderr_path`, with the stage log set
// to `log` and rotated past `max_bytes`; returns the child's exit status.
int LogInChild(const std::string& stderr_path, const std::string& log, uint64_t max_bytes,
               int lines) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) _exit(3);
    SetStageLogFile(log, max_bytes);
    for (int i = 0; i < lines; ++i)
      StageLog("test", "line %04d %s", i, std::string(60, 'x').c_str());
    _exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// The numbers of the "line NNNN" lines of `text`, in order.
std::vector<int> LineNumbers(const std::string& text) {
  std::vector<int> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("] line ");
    if (at != std::string::npos) out.push_back(std::stoi(line.substr(at + 7, 4)));
  }
  return out;
}

TEST(StageLogTest, ALogPastItsSizeGoesToItsOlderPartWithNoLineLost) {
  const testing::ScopedTempDir dir("stage-log");
  const std::string log = dir.path() + "/trainer.log", older = dir.path() + "/trainer.log.1";
  EXPECT_EQ(OlderStageLog(log), older);
  // Not another stage's log: rollout replica 1 writes rollout.1.log.
  EXPECT_NE(OlderStageLog(dir.path() + "/rollout.log"), dir.path() + "/rollout.1.log");
  ASSERT_EQ(LogInChild(log, log, 4000, 300), 0);
  ASSERT_TRUE(ReadFile(older).ok()) << "not rotated";
  const std::string now = *ReadFile(log), before = *ReadFile(older);
  // Each part is about the size (a line over it at most), and the newer one says where the rest
  // is.
  EXPECT_LT(before.size(), 4000u + 200u);
  EXPECT_LT(now.size(), 4000u + 200u);
  EXPECT_EQ(now.rfind("marlaas: the log before this line is in " + older, 0), 0u) << now;
  // The lines of the two parts run on without a gap and end with the last one.
  std::vector<int> numbers = LineNumbers(before);
  for (int n : LineNumbers(now)) numbers.push_back(n);
  ASSERT_GT(numbers.size(), 40u);  // both parts (about 42 lines each)
  EXPECT_EQ(numbers.back(), 299);
  for (size_t i = 1; i < numbers.size(); ++i) ASSERT_EQ(numbers[i], numbers[i - 1] + 1) << i;
}

TEST(StageLogTest, AStderrThatIsNotTheLogIsLeftAlone) {
  const testing::ScopedTempDir dir("stage-log");
  const std::string log = dir.path() + "/trainer.log", elsewhere = dir.path() + "/mine.txt";
  ASSERT_EQ(LogInChild(elsewhere, log, 4000, 300), 0);
  EXPECT_EQ(LineNumbers(*ReadFile(elsewhere)).size(), 300u);  // all of it, where it was sent
  EXPECT_FALSE(ReadFile(log).ok());
  EXPECT_FALSE(ReadFile(dir.path() + "/trainer.log.1").ok());
}

// An exception that ends a stage (LibTorch out of memory) is its last line, tagged as its stop
// reason (serve quotes that line when it gives up on a stage; it quoted "ready"), first line only.
TEST(StageLogTest, AnExceptionThatEndsAStageIsItsStopReason) {
  const testing::ScopedTempDir dir("stage-log");
  const std::string err = dir.path() + "/stderr";
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) _exit(3);
    char arg0[] = "marlaas-test", a1[] = "--instance", a2[] = "i", a3[] = "--state-dir",
         a4[] = "/s", a5[] = "--model-dir", a6[] = "/m";
    char* argv[] = {arg0, a1, a2, a3, a4, a5, a6, nullptr};
    _exit(StageMain(7, argv, "test", [](const StageArgs&) -> Status {
      throw std::runtime_error("can't allocate memory: you tried\nException raised from here");
    }));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string text = *ReadFile(err);
  EXPECT_NE(text.find("] stopped: INTERNAL: uncaught exception: can't allocate memory: you "
                      "tried\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("Exception raised from"), std::string::npos) << text;
}

}  // namespace
}  // namespace marlaas::pipeline

// `marlaas sandbox-check` and `marlaas sandbox-run` as an operator runs them: the real binary (a
// LibTorch process, whose address space is far larger than a run's memory limit), its output
// and its exit status.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "sandbox/escape_suite.h"
#include "tests/procs/run_marlaas.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::CommandResult;
using testing::RunMarlaas;

// Writes `text` to `name` in `dir`; returns its path.
std::string WriteProgram(const testing::ScopedTempDir& dir, const std::string& name,
                         const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(SandboxCliTest, SandboxCheckContainsEveryAttackFromTheRealBinary) {
  const CommandResult r = RunMarlaas("sandbox-check");
  const size_t n = sandbox::EscapeSuite().size();
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(std::to_string(n) + " of " + std::to_string(n) + " attacks contained"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("ESCAPED"), std::string::npos) << r.output;
  // The cgroup row says which version and where, when it is available too.
  const size_t row = r.output.find("cgroup limits per run");
  ASSERT_NE(row, std::string::npos) << r.output;
  const std::string line = r.output.substr(row, r.output.find('\n', row) - row);
  if (line.find(" yes") != std::string::npos) {
    EXPECT_NE(line.find("cgroup v"), std::string::npos) << line;
  }
}

TEST(SandboxCliTest, SandboxRunExitStatusNamesTheOutcome) {
  struct Case {
    const char* name;
    const char* program;
    const char* flags;
    int status;
    const char* says;
  } cases[] = {
      {"ok.py", "print(6 * 7)\n", "", 0, "42\n"},
      {"raises.py", "raise ValueError('no')\n", "", 1, "ValueError: no"},
      {"sleeps.py", "import time\ntime.sleep(30)\n", "--timeout-ms 300", 3, "outcome=timeout"},
      {"spins.py", "while True: pass\n", "--timeout-ms 1000", 3, "signal="},
      {"crashes.py", "import ctypes\nctypes.string_at(0)\n", "", 4, "signal=11"},
      {"floods.py", "import sys\nwhile True: sys.stdout.write('x' * 65536)\n", "", 5,
       "output-limit"},
      {"ok.sh", "echo from sh\n", "--lang sh", 0, "from sh\n"},
      {"named.sh", "echo named sh\n", "", 0, "named sh\n"},  // a .sh name is a shell script
  };
  const testing::ScopedTempDir dir("sandbox-cli");
  for (const Case& c : cases) {
    const CommandResult r = RunMarlaas(std::string("sandbox-run ") + c.flags + " " +
                                       WriteProgram(dir, c.name, c.program));
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.name << ": " << r.output;
  }
}

TEST(SandboxCliTest, SandboxRunRefusesBadArgumentsByName) {
  const testing::ScopedTempDir dir("sandbox-cli");
  const std::string ok = WriteProgram(dir, "fine.py", "print(1)\n");
  CommandResult r = RunMarlaas("sandbox-run --timeout-ms 12abc " + ok);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--timeout-ms"), std::string::npos) << r.output;
  r = RunMarlaas("sandbox-run --memory-mb 0 " + ok);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--memory-mb"), std::string::npos) << r.output;
  r = RunMarlaas("sandbox-run --lang ruby " + ok);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("exit status:"), std::string::npos) << r.output;
  r = RunMarlaas("sandbox-run /nonexistent/prog.py");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("/nonexistent/prog.py"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace marlaas

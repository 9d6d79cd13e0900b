// The benchmark and report commands on bad input: each refusal names what is wrong and comes
// before the work (a full benchmark run takes minutes to hours, and its results were lost to a
// bad --json at the end), and nothing in a state dir makes `report` hang or print garbage.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "tests/procs/run_marlaas.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::RunMarlaas;

struct Case {
  std::string args;  // after the program
  std::string why;   // in its output
};

void ExpectRefused(const std::string& program, const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const auto r = testing::RunProgram(program, c.args);
    EXPECT_EQ(r.status, 2) << program << " " << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.why), std::string::npos)
        << program << " " << c.args << ": " << r.output;
  }
}

TEST(BenchCliTest, BadOutputsListsAndBasesAreRefusedBeforeTheWork) {
  const testing::ScopedTempDir tmp("bench-cli");
  const std::string fifo = tmp.path() + "/fifo", a_file = tmp.path() + "/a-file";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_TRUE(WriteFileAtomically(a_file, "x").ok());
  // The standalone benchmarks (they ran, then lost or misplaced the results).
  ExpectRefused("bench_ring", {{"--json " + fifo, "--json " + fifo + " is a pipe"},
                               {"--json /dev/null", "--json /dev/null is a device"},
                               {"--json " + tmp.path(), "is a folder"},
                               {"--json --quick", "--json needs a file name"},
                               {"--quick --bogus", "unknown argument '--bogus'"}});
  ExpectRefused(
      "marlaas",
      {{"bench sim --calibrate " + a_file + " --json " + fifo, "is a pipe"},
       {"bench sim --calibrate " + a_file + " --json " + tmp.path() + "/no/x.json",
        "--json " + tmp.path() + "/no/x.json: no folder"},
       {"bench sim --calibrate " + a_file + " --tenants 2,2", "distinct"},
       {"bench sim --calibrate " + a_file + " --tenants 8192", "[1, 4096]"},
       {"bench sim --calibrate " + a_file + " --modes async,async", "given twice"},
       {"bench sim --calibrate " + a_file + " --json ''", "--json is empty"},
       {"bench pipeline --tenants 8,8", "--tenants: 8 is given twice"},
       {"bench pipeline --tenants +8", "--tenants: '+8'"},
       {"bench pipeline --modes async,async", "'async' is given twice"},
       {"bench pipeline --json " + fifo, "is a pipe"},
       {"bench pipeline --steps ' 5'", "--steps: ' 5'"},
       {"bench pipeline --json=", "--json is empty"},
       {"bench pipeline --state-dir " + a_file + "/x --model-dir " + tmp.path(),
        "--state-dir " + a_file + "/x cannot hold the runs' state"},
       {"bench pipeline --state-dir " + tmp.path() + "/s --model-dir " + tmp.path() + "/none",
        "--model-dir " + tmp.path() + "/none"}});
  struct stat s {};
  ASSERT_EQ(::stat(fifo.c_str(), &s), 0);
  EXPECT_TRUE(S_ISFIFO(s.st_mode)) << "the pipe was replaced";
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A state dir with damaged files: lines that are not JSON, values no chart can draw, a row wider
// than its buffer, a torn last line, a FIFO where a log should be (it hung the report).
TEST(BenchCliTest, ReportCountsDamagedLinesAndNeverWaitsOnAPipe) {
  const testing::ScopedTempDir tmp("report-cli");
  const std::string sd = tmp.path() + "/sd";
  std::filesystem::create_directories(sd + "/tenants/t1");
  std::filesystem::create_directories(sd + "/tenants/t2");
  const std::string long_task(300, 'k');
  ASSERT_TRUE(WriteFileAtomically(sd + "/tenants/t1/job.json",
                                  "{\"tenant\":\"t1\",\"task\":\"" + long_task + "\"}")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(sd + "/tenants/t1/steps.jsonl",
                                  "{\"step\":1,\"reward_mean\":0.25}\n"
                                  "garbage\n"
                                  "{\"step\":2,\"reward_mean\":1e308}\n"
                                  "{\"step\":3,\"reward_mean\":-1e308}\n"
                                  "{\"step\":4,\"rew\n"
                                  "{\"step\":5,\"reward_mean\":0.5}\n"
                                  "{\"step\":6,\"rewa")  // torn: being written
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(sd + "/tenants/t2/job.json", "{\"task\":\"arithmetic\"}").ok());
  ASSERT_EQ(::mkfifo((sd + "/tenants/t2/steps.jsonl").c_str(), 0600), 0);
  // The metrics log's older part (serve rotates it) is read first, then the current one.
  // (Times as serve writes them, ms since 1970: past a chart's range, which only their
  // distance from the first is drawn in.)
  for (const auto& [name, ms] :
       {std::pair{"/metrics.1.jsonl", 1796000000000LL}, {"/metrics.jsonl", 1796000002000LL}}) {
    ASSERT_TRUE(WriteFileAtomically(sd + name, "{\"unix_ms\":" + std::to_string(ms) +
                                                   ",\"utilization_now\":{\"rollout\":0.5,"
                                                   "\"trainer\":0.25,\"verifier\":0.1}}\n")
                    .ok());
  }
  const std::string out = tmp.path() + "/report";
  const auto r = RunMarlaas("report --state-dir " + sd + " --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  // Four damaged lines in t1 (garbage, two out of range, one cut short) and t2's pipe; the torn
  // last line is not counted.
  EXPECT_NE(r.output.find("left out 5 damaged line(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 tenants, 2 metrics samples"), std::string::npos) << r.output;
  const std::string timeline = ReadAll(out + "/utilization.svg");
  EXPECT_NE(timeline.find("points=\"60.0,"), std::string::npos) << timeline;  // both drawn
  EXPECT_EQ(timeline.find("points=\"\""), std::string::npos) << timeline;
  EXPECT_NE(r.output.find(sd + "/tenants/t1/steps.jsonl:2 (not a JSON object)"), std::string::npos)
      << r.output;
  const std::string table = ReadAll(out + "/table.txt");
  EXPECT_NE(table.find("t1" + std::string(23, ' ') + long_task), std::string::npos) << table;
  EXPECT_NE(table.find("     2    0.250    0.500\n"), std::string::npos) << table;
  EXPECT_NE(table.find("t2 "), std::string::npos) << table;
  const std::string svg = ReadAll(out + "/rewards.svg");
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_NE(svg.find("polyline"), std::string::npos);
  // A report among the tenants' folders would be taken for one.
  const auto inside = RunMarlaas("report --state-dir " + sd + " --out " + sd + "/tenants/r");
  EXPECT_EQ(inside.status, 2) << inside.output;
  EXPECT_NE(inside.output.find("is inside"), std::string::npos) << inside.output;
  EXPECT_FALSE(std::filesystem::exists(sd + "/tenants/r"));
}

}  // namespace
}  // namespace marlaas

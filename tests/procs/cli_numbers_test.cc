// The commands' whole-number options are read strictly and range-checked, each refusal naming the
// option and its range (exit 2) before anything starts: pretrain's used to wrap (--steps
// 4294967297 trained 1 step) or hang (--threads 100000 asked OpenMP for 100000 threads).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/procs/run_marlaas.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::RunMarlaas;

TEST(CliNumbersTest, PretrainAndDemoRefuseBadNumbersByName) {
  const testing::ScopedTempDir dir("cli-numbers");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"pretrain --out " + dir.path() + "/m --steps 4294967297",
       "--steps: '4294967297' is not a whole number in [1, 10000000]"},
      {"pretrain --out " + dir.path() + "/m --threads 100000",
       "--threads: '100000' is not a whole number in [1, 256]"},
      {"pretrain --out " + dir.path() + "/m --threads -3", "--threads: '-3'"},
      {"pretrain --out " + dir.path() + "/m --seed 99999999999999999999", "--seed: '9999"},
      {"pretrain --out " + dir.path() + "/m --steps 2x", "--steps: '2x'"},
      {"demo --state-dir " + dir.path() + "/s --tenants 0",
       "--tenants: '0' is not a whole number in [1, 64]"},
      {"demo --state-dir " + dir.path() + "/s --steps 1e3", "--steps: '1e3'"},
  };
  for (const auto& [args, why] : cases) {
    const auto r = RunMarlaas(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << args << ": " << r.output;
  }
  // Nothing was started or written.
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/m"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/s"));
}

// `sample` without --task named the job spec's field ("field 'task': ''"), not the option.
TEST(CliNumbersTest, SampleNamesAMissingTaskAndBadNumbers) {
  for (const auto& [args, why] : std::vector<std::pair<std::string, std::string>>{
           {"sample --n 3", "--task T is required"},
           {"sample --task arithmetic --n 0", "--n: '0' is not a whole number in [1, 100000]"},
           {"sample --task arithmetic --temperature nan", "--temperature: 'nan'"},
           {"sample --task arithmetic --temperature 1e-40", "--temperature 1e-40 is below 0.01"},
           {"sample --task arithmetic --difficulty +2", "--difficulty: '+2'"},
           {"sample --task arithmetic --adapter ''", "--adapter is empty"}}) {
    const auto r = RunMarlaas(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << args << ": " << r.output;
  }
}

// An instance name is checked where it is given, as the segments' names check it: `serve
// --instance a/b` failed only when its first segment was made (exit 1), and `segments --instance
// ''` listed every instance's segments.
TEST(CliNumbersTest, InstanceNamesAreCheckedWhereTheyAreGiven) {
  const testing::ScopedTempDir dir("cli-instance");
  const std::string why = "must be 1-32 characters of [A-Za-z0-9_-]";
  const std::vector<std::string> cases = {
      "serve --state-dir " + dir.path() + "/s --instance a/b",
      "serve --state-dir " + dir.path() + "/s --instance=" + std::string(33, 'x'),
      "segments --instance ..",
      "clean --dry-run --instance a.b",
      "clean --instance 'a b'",
  };
  for (const std::string& args : cases) {
    const auto r = RunMarlaas(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("--instance: instance name '"), std::string::npos)
        << args << ": " << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << args << ": " << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/s"));
  // An empty one is not a name at all (it listed every instance's segments).
  for (const std::string args : {"segments --instance=", "clean --instance="}) {
    const auto r = RunMarlaas(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("--instance is empty"), std::string::npos) << args << ": " << r.output;
  }
  // A good name still lists (none of its segments exist).
  for (const std::string command : {"segments", "clean --dry-run"}) {
    const auto ok = RunMarlaas(command + " --instance no-such_instance-1");
    EXPECT_EQ(ok.status, 0) << ok.output;
    EXPECT_NE(ok.output.find("no MARLaaS segments"), std::string::npos) << command << ok.output;
  }
}

}  // namespace
}  // namespace marlaas

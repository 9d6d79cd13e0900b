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

}  // namespace
}  // namespace marlaas

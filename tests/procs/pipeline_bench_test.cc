// `marlaas bench pipeline`'s three schedules on the real pipeline: the same tenants finish the
// same steps in each; the synchronous ones never train a stale group, sequential_sync runs one
// tenant after another, and multi_tenant_sync steps every tenant in the same trainer step.
#include "bench/pipeline_bench.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/sim/sim_report.h"
#include "tests/procs/pipeline_fixture.h"

namespace marlaas::testing {
namespace {

namespace fs = std::filesystem;

// Each tenant's step times from its steps.jsonl, in step order.
std::vector<std::vector<double>> StepTimes(const std::string& state_dir, int tenants) {
  std::vector<std::vector<double>> out(static_cast<size_t>(tenants));
  for (int k = 0; k < tenants; ++k) {
    std::ifstream f(state_dir + "/tenants/t" + std::to_string(k) + "/steps.jsonl");
    for (std::string l; std::getline(f, l);)
      out[size_t(k)].push_back(nlohmann::json::parse(l)["time"].get<double>());
  }
  return out;
}

TEST(PipelineBenchTest, TheThreeModesTrainTheSameTenantsToTheEnd) {
  bench::PipelineBenchOptions o;
  o.model_dir = TestBaseModel();
  o.work_dir = fs::temp_directory_path().string() + "/marlaas-bench-" + std::to_string(::getpid());
  o.bin_dir = MARLAAS_BIN_DIR;
  o.steps = 3;
  o.eval_prompts = 8;
  o.timeout_s = 150;
  o.keep_state = true;
  o.quiet = true;
  constexpr int kTenants = 3;
  const uint64_t expected_samples = kTenants * 3 * 2 * 4;  // steps x prompts x group size
  for (const std::string& mode : bench::PipelineModes()) {
    auto run = bench::RunPipelineMode(mode, kTenants, 1, o);
    ASSERT_TRUE(run.ok()) << mode << ": " << run.status().ToString();
    EXPECT_TRUE(run->complete) << mode;
    EXPECT_GT(run->wall_s, 0) << mode;
    EXPECT_EQ(run->stage_restarts, 0) << mode;
    ASSERT_EQ(run->final_rewards.size(), size_t(kTenants));
    for (double r : run->final_rewards) EXPECT_TRUE(r >= 0 && r <= 1) << mode;
    // The stage costs bench/sim calibrates from: every pass counted, every tenant's task.
    EXPECT_GT(run->costs.rollout.n, 0u) << mode;
    if (mode == "multi_tenant_sync") {
      EXPECT_EQ(run->costs.trainer.n, 3u) << "one step a round";
    }
    if (mode == "sequential_sync") {
      EXPECT_EQ(run->costs.trainer.n, uint64_t(kTenants * 3));
    }
    uint64_t tenants_seen = 0, completions = 0;
    for (const auto& [task, c] : run->costs.tasks) {
      tenants_seen += c.tenants;
      completions += c.completions;
      EXPECT_GT(c.prompt_tokens, 0u) << task;
      EXPECT_EQ(c.groups_scored, c.groups_trained) << task;
    }
    EXPECT_EQ(tenants_seen, uint64_t(kTenants)) << mode;
    EXPECT_GE(completions, expected_samples) << mode;
    // ... and the simulator replays the run to its end from them.
    const sim::MeasuredRun measured = bench::ToMeasuredRun(*run);
    auto profile = sim::CalibrateProfile({measured}, 2, mode);
    ASSERT_TRUE(profile.ok()) << mode << ": " << profile.status().ToString();
    auto replay = sim::Simulate(sim::SetupOf(measured), *profile);
    ASSERT_TRUE(replay.ok()) << mode << ": " << replay.status().ToString();
    EXPECT_TRUE(replay->complete) << mode;
    EXPECT_EQ(replay->samples, expected_samples) << mode;
    if (mode == "async") {
      EXPECT_GE(run->samples, expected_samples);
      continue;
    }
    // Lockstep: exactly what the steps need, nothing stale, nothing dropped.
    EXPECT_EQ(run->samples, expected_samples) << mode;
    EXPECT_EQ(run->groups_dropped, 0u) << mode;
    uint64_t trained = 0;
    for (int b = 0; b < kStalenessBuckets; ++b) {
      trained += run->staleness[size_t(b)];
      if (b > 0) {
        EXPECT_EQ(run->staleness[size_t(b)], 0u) << mode << " trained stale groups";
      }
    }
    EXPECT_EQ(trained, uint64_t(kTenants * 3 * 2)) << mode;
    std::string dir;
    for (const auto& e : fs::directory_iterator(o.work_dir))
      if (e.path().filename().string().rfind(mode + "-", 0) == 0) dir = e.path().string();
    ASSERT_FALSE(dir.empty()) << mode;
    const auto times = StepTimes(dir, kTenants);
    for (const auto& t : times) ASSERT_EQ(t.size(), 3u) << mode;
    if (mode == "sequential_sync") {
      for (int k = 1; k < kTenants; ++k)
        EXPECT_GE(times[size_t(k)].front(), times[size_t(k - 1)].back())
            << "tenant " << k << " trained before tenant " << k - 1 << " was done";
    } else {
      // One trainer step per round holds every tenant's step s.
      for (size_t s = 0; s < 3; ++s)
        for (int k = 1; k < kTenants; ++k)
          EXPECT_NEAR(times[size_t(k)][s], times[0][s], 0.25) << "step " << s + 1;
    }
  }
  fs::remove_all(o.work_dir);
}

}  // namespace
}  // namespace marlaas::testing

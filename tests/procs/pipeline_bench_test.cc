// `marlaas bench pipeline`'s three schedules on the real pipeline: the same tenants finish the
// same steps in each; the synchronous ones never train a stale group, sequential_sync runs one
// tenant after another, and multi_tenant_sync steps every tenant in the same trainer step.
#include "bench/pipeline_bench.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench/sim/sim_report.h"
#include "procs/common/pipeline.h"
#include "tests/procs/pipeline_fixture.h"
#include "tests/test_util.h"

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

// A run asked to stop (Ctrl-C: the CLI's handler sets the stop flag) while its tenants train
// ends at once as cancelled, with its stages stopped, its shared memory and its state dir gone.
// In a child process: the stop flag is the process's.
TEST(PipelineBenchTest, AnInterruptedRunLeavesNothingBehind) {
  const std::string model = TestBaseModel();
  const std::string work =
      fs::temp_directory_path().string() + "/marlaas-bench-stop-" + std::to_string(::getpid());
  fs::remove_all(work);
  const pid_t child = ForkChild([&] {
    bench::PipelineBenchOptions o;
    o.model_dir = model;
    o.work_dir = work;
    o.bin_dir = MARLAAS_BIN_DIR;
    o.steps = 200;  // far more than it gets to
    o.timeout_s = 100;
    o.quiet = true;
    std::thread stopper([&] {
      // Once a tenant has trained a step (steps.jsonl in its dir), ask to stop.
      for (int i = 0; i < 6000; ++i) {
        std::error_code ec;
        for (const auto& e : fs::recursive_directory_iterator(work, ec))
          if (e.path().filename() == "steps.jsonl") return pipeline::RequestStop();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    auto run = bench::RunPipelineMode("async", 2, 1, o);
    stopper.join();
    if (run.ok()) return 2;
    return run.status().code() == StatusCode::kCancelled ? 0 : 3;
  });
  const ChildExit e = WaitChildFor(child, 150);
  ASSERT_TRUE(e.exited) << "timed out: " << e.timed_out << ", signal " << e.signal;
  EXPECT_EQ(e.code, 0) << "2: it ran to the end; 3: another error";
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(work, ec)) << "a state dir was left in " << work;
  // Its instance is bench<child pid>r<n>: no segment of it is left.
  const std::string prefix = "marlaas.bench" + std::to_string(child) + "r";
  for (const auto& f : fs::directory_iterator("/dev/shm", ec))
    EXPECT_NE(f.path().filename().string().rfind(prefix, 0), 0u) << f.path();
  fs::remove_all(work);
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

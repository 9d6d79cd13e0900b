// The bench pipeline summary: averages over seeds, the spread, the async / sequential ratios and
// the 32-tenant targets, from hand-made runs.
#include "bench/pipeline_summary.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace marlaas::bench {
namespace {

PipelineRun MakeRun(const std::string& mode, int tenants, uint64_t seed, double wall, double util,
                    double reward) {
  PipelineRun r;
  r.mode = mode;
  r.tenants = tenants;
  r.seed = seed;
  r.complete = true;
  r.wall_s = wall;
  r.util_rollout = util;
  r.util_trainer = util;
  r.samples = 100;
  r.samples_per_s = 100 / wall;
  r.final_rewards.assign(size_t(tenants), reward);
  r.final_reward_mean = reward;
  r.staleness[0] = 10;
  return r;
}

TEST(PipelineSummaryTest, SeedsAreAveragedAndRatiosTakenWithinTheRun) {
  const std::vector<PipelineRun> runs = {MakeRun("sequential_sync", 32, 1, 800, 0.10, 0.50),
                                         MakeRun("sequential_sync", 32, 2, 1000, 0.12, 0.54),
                                         MakeRun("async", 32, 1, 100, 0.50, 0.52),
                                         MakeRun("async", 32, 2, 120, 0.58, 0.48),
                                         MakeRun("multi_tenant_sync", 32, 1, 300, 0.2, 0.5),
                                         MakeRun("async", 8, 1, 50, 0.4, 0.5),
                                         MakeRun("async", 8, 1, 70, 0.4, 0.5)};  // a repeat
  const PipelineSummary s = SummarisePipelineRuns(runs);
  ASSERT_EQ(s.rows.size(), 4u);
  const PipelineRow* seq = nullptr;
  const PipelineRow* async = nullptr;
  for (const PipelineRow& r : s.rows) {
    if (r.mode == "sequential_sync") seq = &r;
    if (r.mode == "async" && r.tenants == 32) async = &r;
  }
  ASSERT_NE(seq, nullptr);
  ASSERT_NE(async, nullptr);
  const PipelineRow& async8 = s.rows.front();  // by tenant count
  ASSERT_EQ(async8.tenants, 8);
  EXPECT_EQ(async8.seeds, 1);
  EXPECT_EQ(async8.runs, 2);
  EXPECT_DOUBLE_EQ(async8.wall_s, 60);
  EXPECT_EQ(seq->seeds, 2);
  EXPECT_EQ(seq->runs, 2);
  EXPECT_DOUBLE_EQ(seq->wall_s, 900);
  EXPECT_NEAR(seq->final_reward_spread, 0.04, 1e-12);
  EXPECT_NEAR(async->idle_fraction, 1 - 0.54, 1e-12);
  EXPECT_EQ(async->staleness[0], 20u);
  // Only 32 tenants has both modes: one ratio row, three targets.
  ASSERT_EQ(s.ratios.size(), 1u);
  EXPECT_NEAR(s.ratios[0].speedup, 900.0 / 110.0, 1e-9);
  EXPECT_NEAR(s.ratios[0].util_ratio, 0.54 / 0.11, 1e-9);
  EXPECT_NEAR(s.ratios[0].multi_speedup, 3.0, 1e-9);
  EXPECT_TRUE(s.ratios[0].quality_within_spread);  // |0.50 - 0.52| <= 0.05
  ASSERT_EQ(s.targets.size(), 3u);
  EXPECT_TRUE(s.targets[0].met());  // 8.2x >= 7
  EXPECT_TRUE(s.targets[1].met());  // 4.9x >= 4.5
  const auto doc = nlohmann::json::parse(PipelineJson(s, runs, 200, 8));
  EXPECT_EQ(doc["runs"].size(), 4u);
  EXPECT_EQ(doc["env_latency_ms"], 200);
  for (const char* key : {"mode", "tenants", "wall_s", "util_rollout", "util_trainer",
                          "samples_per_s", "final_reward_mean", "final_reward_spread"})
    EXPECT_TRUE(doc["runs"][0].contains(key)) << key;
  EXPECT_NE(PipelineTable(s).find("8.18x faster"), std::string::npos) << PipelineTable(s);
}

TEST(PipelineSummaryTest, AQualityGapBeyondTheSpreadAndMissedTargetsShow) {
  const std::vector<PipelineRun> runs = {MakeRun("sequential_sync", 32, 1, 100, 0.3, 0.9),
                                         MakeRun("async", 32, 1, 50, 0.4, 0.5)};
  const PipelineSummary s = SummarisePipelineRuns(runs);
  ASSERT_EQ(s.ratios.size(), 1u);
  EXPECT_FALSE(s.ratios[0].quality_within_spread);
  for (const Target& t : s.targets) EXPECT_FALSE(t.met()) << t.name;
}

// The reward spread is over seeds: repeats of a seed are averaged first, so more repeats do not
// widen it (and with them the quality check). An engine never seen busy misses the targets.
TEST(PipelineSummaryTest, TheRewardSpreadIsOverSeedMeansAndAnIdleBaselineMissesTheTargets) {
  const std::vector<PipelineRun> runs = {MakeRun("sequential_sync", 32, 1, 100, 0.0, 0.40),
                                         MakeRun("sequential_sync", 32, 1, 100, 0.0, 0.60),
                                         MakeRun("sequential_sync", 32, 2, 100, 0.0, 0.52),
                                         MakeRun("async", 32, 1, 10, 0.5, 0.50)};
  const PipelineSummary s = SummarisePipelineRuns(runs);
  ASSERT_EQ(s.rows.size(), 2u);
  const PipelineRow& seq = s.rows[0];
  ASSERT_EQ(seq.mode, "sequential_sync");
  EXPECT_EQ(seq.runs, 3);
  EXPECT_NEAR(seq.final_reward_spread, 0.02, 1e-12);  // seed means 0.50 and 0.52, not 0.40-0.60
  ASSERT_EQ(seq.tenant_reward_spread.size(), 32u);
  EXPECT_NEAR(seq.tenant_reward_spread[5], 0.02, 1e-12);
  EXPECT_NEAR(seq.final_reward_mean, 1.52 / 3, 1e-12);  // the mean of its runs
  ASSERT_EQ(s.ratios.size(), 1u);
  EXPECT_EQ(s.ratios[0].util_ratio, 0.0);
  ASSERT_EQ(s.targets.size(), 3u);
  EXPECT_TRUE(s.targets[0].met());   // 10x sooner
  EXPECT_FALSE(s.targets[1].met());  // no utilisation ratio: missed, not left out
}

}  // namespace
}  // namespace marlaas::bench

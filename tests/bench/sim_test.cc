// bench/sim: the cost fit, the profile and measured-run JSON, and the simulator against closed
// forms and against the orderings a scheduler must respect.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "bench/sim/cost_model.h"
#include "bench/sim/measured_run.h"
#include "bench/sim/sim_report.h"
#include "bench/sim/simulator.h"

namespace marlaas::sim {
namespace {

TEST(SimCostFitTest, RecoversTheCoefficientsOfANoisyLinearCost) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> rows(1, 96), noise(-1e-5, 1e-5);
  CostSums sums{};
  for (int i = 0; i < 2000; ++i) {
    const double r = std::floor(rows(rng)), tokens = r + std::floor(rows(rng)) * 3;
    const double adapters = 1 + i % 7;
    sums.Add(r, tokens, adapters, 0,
             2e-3 + 1e-4 * r + 3e-6 * tokens + 5e-5 * adapters + noise(rng));
  }
  auto fit = FitLinearCost(sums);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->c[0], 2e-3, 2e-5);
  EXPECT_NEAR(fit->c[1], 1e-4, 2e-6);
  EXPECT_NEAR(fit->c[2], 3e-6, 2e-7);
  EXPECT_NEAR(fit->c[3], 5e-5, 2e-6);
}

TEST(SimCostFitTest, AConstantOrHarmfulRegressorGetsZeroNeverANegativeCoefficient) {
  CostSums sums{};
  // Cost grows with rows; tokens track rows but cost falls with them in this data, and
  // adapters never vary: a plain least squares would give tokens a negative coefficient.
  for (int r = 1; r <= 50; ++r) sums.Add(r, 100.0 - r, 1, 0, 1e-3 + 2e-4 * r);
  auto fit = FitLinearCost(sums);
  ASSERT_TRUE(fit.ok());
  for (double c : fit->c) EXPECT_GE(c, 0);
  EXPECT_NEAR(fit->Seconds(10, 90, 1, false), 1e-3 + 2e-4 * 10, 1e-9);
  EXPECT_EQ(fit->c[3], 0);
  CostSums one{};
  one.Add(1, 1, 1, 0, 1);
  EXPECT_FALSE(FitLinearCost(one).ok());
}

TEST(SimCostFitTest, ACostThatGrowsFasterThanLinearlyIsFitWithoutTheConstant) {
  // Small passes cost a little less than a line through the large ones predicts (as a trainer
  // step does): with the constant the fit wants it negative. The kept fit must follow the
  // tokens, not collapse to the mean.
  CostSums sums{};
  for (int i = 1; i <= 40; ++i) {
    const double tokens = 40.0 * i;
    sums.Add(i, tokens, 1, 0, 1e-4 * tokens + 2e-8 * tokens * tokens);
  }
  auto fit = FitLinearCost(sums);
  ASSERT_TRUE(fit.ok());
  for (double c : fit->c) EXPECT_GE(c, 0);
  EXPECT_GT(fit->c[1] + fit->c[2], 0);
  // Within 25% at the small and the large end; the mean alone is off by 4x at one end.
  for (double tokens : {80.0, 1600.0}) {
    const double truth = 1e-4 * tokens + 2e-8 * tokens * tokens;
    EXPECT_NEAR(fit->Seconds(tokens / 40, tokens, 1, false), truth, 0.25 * truth) << tokens;
  }
}

TEST(SimCostFitTest, SmallPassesAreFitAsCloselyAsLargeOnes) {
  // A per-step overhead plus a cost that grows faster than linearly, over passes from 20 to
  // 4000 tokens, the large ones many times more frequent (as in a 32-tenant run). Fit
  // unweighted, the large passes set the line and a small step comes out at about half its cost;
  // each pass weighted by 1/seconds^2 keeps every size within 30%.
  CostSums sums{};
  auto truth = [](double tokens) { return 4e-3 + 1e-5 * tokens + 2e-9 * tokens * tokens; };
  for (int i = 0; i < 400; ++i) {
    const double tokens = i % 10 == 0 ? 20.0 + i : 2000.0 + 5 * i;
    sums.Add(tokens / 20, tokens, 1, 0, truth(tokens));
  }
  auto fit = FitLinearCost(sums);
  ASSERT_TRUE(fit.ok());
  for (double tokens : {20.0, 400.0, 2000.0, 4000.0})
    EXPECT_NEAR(fit->Seconds(tokens / 20, tokens, 1, false), truth(tokens), 0.3 * truth(tokens))
        << tokens;
}

CostProfile SimpleProfile() {
  CostProfile p;
  p.name = "test";
  p.cores = 2;
  p.rollout.c = {0.01, 0, 0, 0};  // every pass 10 ms
  p.trainer.c = {0.2, 0, 0, 0};   // every step 200 ms
  TaskCost t;
  t.prompt_tokens = 10;
  t.completion_tokens = 5;  // exactly 5 tokens: 5 passes per round
  t.verify_s = 0;
  p.tasks["arithmetic"] = t;
  return p;
}

TEST(SimCostProfileTest, JsonRoundTripsAndErrorsNameTheField) {
  CostProfile p = SimpleProfile();
  p.tasks["calculator_tool"].tool_calls = 1;
  p.admit_s = 0.002;
  p.settle_s = 0.003;
  auto back = CostProfileFromJson(CostProfileToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rollout.c, p.rollout.c);
  EXPECT_EQ(back->tasks.at("calculator_tool").tool_calls, 1);
  EXPECT_EQ(back->admit_s, p.admit_s);
  EXPECT_EQ(back->settle_s, p.settle_s);
  p.tasks["calculator_tool"].shared_tool_calls = 0.5;
  back = CostProfileFromJson(CostProfileToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tasks.at("calculator_tool").shared_tool_calls, 0.5);
  p.tasks["calculator_tool"].prompt_rows = 0.25;
  p.tasks["calculator_tool"].prompt_row_tokens = 16;
  back = CostProfileFromJson(CostProfileToJson(p));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tasks.at("calculator_tool").prompt_rows, 0.25);
  EXPECT_EQ(back->tasks.at("calculator_tool").prompt_row_tokens, 16);
  auto prompts = CostProfileFromJson(
      R"({"rollout":[0,0,0,0],"trainer":[0,0,0,0],"tasks":{"x":{"trained_tokens":10,)"
      R"("prompt_rows":0.5,"prompt_row_tokens":20}}})");  // the prompts alone are 10 a row
  ASSERT_FALSE(prompts.ok());
  EXPECT_NE(prompts.status().message().find("tasks.x.prompt_rows"), std::string::npos);
  auto share = CostProfileFromJson(
      R"({"rollout":[0,0,0,0],"trainer":[0,0,0,0],"tasks":{"x":{"shared_tool_calls":1.5}}})");
  ASSERT_FALSE(share.ok());
  EXPECT_NE(share.status().message().find("tasks.x.shared_tool_calls"), std::string::npos);
  auto unknown = CostProfileFromJson(
      R"({"rollout":[0,0,0,0],"trainer":[0,0,0,0],"tasks":{"arithmetic":{"bogus":1}}})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("tasks.arithmetic.bogus"), std::string::npos);
  auto negative = CostProfileFromJson(R"({"rollout":[0,-1,0,0],"trainer":[0,0,0,0]})");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("rollout[1]"), std::string::npos);
  // A pass of 1e308 s per row stalled the simulator's clock; an hour per term is the most.
  auto huge = CostProfileFromJson(R"({"rollout":[0,0,0,0],"trainer":[0,0,1e308,0]})");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("trainer[2]: must be a number in [0, 3600]"),
            std::string::npos)
      << huge.status().ToString();
  auto cores = CostProfileFromJson(R"({"rollout":[0,0,0,0],"trainer":[0,0,0,0],"cores":0})");
  ASSERT_FALSE(cores.ok());
  EXPECT_NE(cores.status().message().find("cores"), std::string::npos);
  EXPECT_FALSE(CostProfileFromJson(R"({"trainer":[0,0,0,0]})").ok());  // rollout missing
  // Four coefficients: a profile from before the cold-start term, which it then lacks.
  auto four = CostProfileFromJson(R"({"rollout":[1,0,0,0],"trainer":[0,0,0,2]})");
  ASSERT_TRUE(four.ok()) << four.status().ToString();
  EXPECT_EQ(four->rollout.c[0], 1);
  EXPECT_EQ(four->rollout.c[4], 0);
  EXPECT_EQ(four->trainer.c[3], 2);
  EXPECT_EQ(back->trainer.c, p.trainer.c);  // all five written and read back
}

TEST(SimulatorTest, OneSequentialTenantTakesTheSumOfItsStagesAndPolls) {
  const CostProfile p = SimpleProfile();
  SimSetup s;
  s.mode = "sequential_sync";
  s.tasks = {"arithmetic"};
  s.steps = 4;
  s.group_size = 4;
  s.prompts_per_step = 2;
  auto r = Simulate(s, p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->complete);
  // Admission: the trainer's table poll (half of 2 ms) and the rollout's idle sync (half of
  // 2 ms); each step 5 passes of 10 ms, two ring hops (rollout to verifier to trainer, 0.15 ms
  // each) and a 200 ms training step; after each step the idle rollout sees the step within its
  // look for one (half of 0.5 ms); the service's tick (half of 2 ms) at the end.
  const double expected = 0.001 + 0.001 + 4 * (5 * 0.01 + 0.2 + 2 * 0.00015) + 3 * 0.00025 + 0.001;
  EXPECT_NEAR(r->wall_s, expected, 1e-9);
  EXPECT_EQ(r->forward_passes, 4u * 5u);
  EXPECT_EQ(r->train_steps, 4u);
  EXPECT_EQ(r->samples, 4u * 2u * 4u);
  EXPECT_NEAR(r->util_trainer, 4 * 0.2 / expected, 1e-9);
  // Checkpoints every 2 steps (after steps 2 and 4, the last) add their time to those steps.
  CostProfile with_checkpoints = p;
  with_checkpoints.checkpoint_s = 0.05;
  s.checkpoint_every = 2;
  auto c = Simulate(s, with_checkpoints);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NEAR(c->wall_s, expected + 2 * 0.05, 1e-9);
  s.checkpoint_every = 3;  // after step 3 and after the last
  c = Simulate(s, with_checkpoints);
  ASSERT_TRUE(c.ok());
  EXPECT_NEAR(c->wall_s, expected + 2 * 0.05, 1e-9);
  s.checkpoint_every = 0;
  EXPECT_FALSE(Simulate(s, with_checkpoints).ok());
  s.checkpoint_every = 10;
  // Cold passes (CostSums::kColdAfterNs): each round's first rollout pass comes after the 200 ms
  // step, each step after 50 ms of generation; the passes within a round are back to back.
  CostProfile cold = p;
  cold.rollout.c[4] = 0.003;
  cold.trainer.c[4] = 0.03;
  auto k = Simulate(s, cold);
  ASSERT_TRUE(k.ok());
  EXPECT_NEAR(k->wall_s, expected + 4 * 0.003 + 4 * 0.03, 1e-9);
  // Admitting takes the service admit_s a tenant before any stage sees it: one after another in
  // sequential_sync, all of them before the first is seen in the batched modes.
  CostProfile admitting = p;
  admitting.admit_s = 0.02;
  s.checkpoint_every = 10;
  auto a = Simulate(s, admitting);
  ASSERT_TRUE(a.ok());
  EXPECT_NEAR(a->wall_s, expected + 0.02, 1e-9);
  s.tasks = {"arithmetic", "arithmetic", "arithmetic"};
  auto three = Simulate(s, p), three_admitting = Simulate(s, admitting);
  ASSERT_TRUE(three.ok() && three_admitting.ok());
  EXPECT_NEAR(three_admitting->wall_s - three->wall_s, 3 * 0.02, 1e-9);
  // Settling a finished tenant (settle_s, one at a time) holds back the next admission, and the
  // run ends when the last is settled.
  CostProfile settling = p;
  settling.settle_s = 0.03;
  auto three_settling = Simulate(s, settling);
  ASSERT_TRUE(three_settling.ok());
  EXPECT_NEAR(three_settling->wall_s - three->wall_s, 3 * 0.03, 1e-9);
  s.mode = "multi_tenant_sync";
  three = Simulate(s, p), three_admitting = Simulate(s, admitting);
  ASSERT_TRUE(three.ok() && three_admitting.ok());
  EXPECT_NEAR(three_admitting->wall_s - three->wall_s, 3 * 0.02, 1e-9);
  three_settling = Simulate(s, settling);  // the three finish together: settled in turn
  ASSERT_TRUE(three_settling.ok());
  EXPECT_NEAR(three_settling->wall_s - three->wall_s, 3 * 0.03, 1e-9);
}

// The simulated trainer pads as rl::MultiTenantStep does: tenants whose rows are within 2x of the
// longest share its padded length, a tenant more than 2x shorter gets a batch of its own.
TEST(SimulatorTest, ATrainingStepPadsTenantsOfSimilarLengthToTheLongest) {
  CostProfile p = SimpleProfile();
  p.trainer.c = {0, 0, 1e-4, 0};  // 0.1 ms per padded token
  p.tasks["arithmetic"].trained_tokens = 10;
  p.tasks["countdown"] = p.tasks["arithmetic"];
  p.tasks["countdown"].trained_tokens = 15;
  p.tasks["python_functions"] = p.tasks["arithmetic"];
  p.tasks["python_functions"].trained_tokens = 100;
  SimSetup s;
  s.mode = "multi_tenant_sync";
  s.steps = 1;  // one step for the three tenants together: 8 rows each
  auto busy = [&](std::vector<std::string> tasks) {
    s.tasks = std::move(tasks);
    auto r = Simulate(s, p);
    EXPECT_TRUE(r.ok() && r->complete) << r.status().ToString();
    if (!r.ok()) return -1.0;
    EXPECT_EQ(r->train_steps, 1u);
    return r->util_trainer * r->wall_s;
  };
  EXPECT_NEAR(busy({"arithmetic"}), 8 * 10 * 1e-4, 1e-9);
  EXPECT_NEAR(busy({"arithmetic", "countdown"}), 16 * 15 * 1e-4, 1e-9);
  EXPECT_NEAR(busy({"arithmetic", "countdown", "python_functions"}), (16 * 15 + 8 * 100) * 1e-4,
              1e-9);
  // With their shared prompts apart: bucketed by the rows' own part (8 and 5 tokens, one
  // bucket), padded to the longest (8), and every prompt row to the longest prompt (40).
  p.tasks["arithmetic"].prompt_rows = 0.25;  // 10 = 8 + 0.25 x 8
  p.tasks["arithmetic"].prompt_row_tokens = 8;
  p.tasks["countdown"].prompt_rows = 0.25;  // 15 = 5 + 0.25 x 40
  p.tasks["countdown"].prompt_row_tokens = 40;
  EXPECT_NEAR(busy({"arithmetic"}), 8 * 10 * 1e-4, 1e-9);
  EXPECT_NEAR(busy({"countdown"}), 8 * 15 * 1e-4, 1e-9);
  EXPECT_NEAR(busy({"arithmetic", "countdown", "python_functions"}),
              (16 * (8 + 0.25 * 40) + 8 * 100) * 1e-4, 1e-9);
}

// Each group is degenerate (no rows to train) with the task's share, drawn when it starts: one
// run's training time is a multiple of a group's rows, runs differ, and the mean over replicates
// (SimulateMean, the mean of the seeded runs) comes to the share.
TEST(SimulatorTest, DegenerateGroupsAreDrawnPerGroupAndTheMeanOfRunsKeepsTheShare) {
  CostProfile p = SimpleProfile();
  p.trainer.c = {0, 1e-3, 0, 0};  // 1 ms per trained row: a group of 4 trains in 4 ms
  SimSetup s;
  s.mode = "sequential_sync";
  s.tasks = {"arithmetic"};
  s.steps = 40;  // 80 groups
  auto trained_s = [&](double degenerate, uint64_t seed) {
    p.tasks["arithmetic"].degenerate = degenerate;
    s.seed = seed;
    auto r = Simulate(s, p);
    EXPECT_TRUE(r.ok() && r->complete);
    return r.ok() ? r->util_trainer * r->wall_s : -1.0;
  };
  EXPECT_NEAR(trained_s(0, 1), 80 * 4e-3, 1e-9);
  EXPECT_NEAR(trained_s(1, 1), 0, 1e-9);
  std::set<long> seen;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const double t = trained_s(0.5, seed);
    const double groups = t / 4e-3;
    EXPECT_NEAR(groups, std::round(groups), 1e-6) << "whole groups only";
    EXPECT_GT(groups, 20);  // 40 expected; 20 is 4.5 sigma below
    EXPECT_LT(groups, 60);
    seen.insert(std::lround(groups));
  }
  EXPECT_GT(seen.size(), 1u) << "every seed drew the same groups";
  p.tasks["arithmetic"].degenerate = 0.5;
  s.seed = 11;
  auto mean = SimulateMean(s, p, 4);
  ASSERT_TRUE(mean.ok()) << mean.status().ToString();
  double wall = 0;
  for (uint64_t k = 0; k < 4; ++k) {
    SimSetup one = s;
    one.seed = 11 + k;
    auto r = Simulate(one, p);
    ASSERT_TRUE(r.ok());
    wall += r->wall_s / 4;
  }
  EXPECT_NEAR(mean->wall_s, wall, 1e-12);
  EXPECT_TRUE(mean->complete);
  EXPECT_EQ(mean->train_steps, 40u);
  EXPECT_FALSE(SimulateMean(s, p, 0).ok());
  // The per-tenant term is a tenant that trains (forward, backward, optimizer): a step whose
  // groups are all degenerate does not pay it (the trainer's fit counts tenants with rows).
  // Nor the cold term: every step here follows the rollout's generation (cold), and a step of only
  // degenerate groups computes nothing.
  p.trainer.c = {0, 0, 0, 0.05, 0.07};
  s.seed = 1;
  EXPECT_NEAR(trained_s(0, 1), 40 * (0.05 + 0.07), 1e-9);
  EXPECT_NEAR(trained_s(1, 1), 0, 1e-9);
}

TEST(SimulatorTest, OverlapAndBatchingMakeAsyncFasterAndSharedCoresSlowItDown) {
  CostProfile p = SimpleProfile();
  p.rollout.c = {0.004, 2e-4, 1e-5, 1e-4};
  p.trainer.c = {0.02, 5e-4, 1e-5, 1e-3};
  p.tasks["arithmetic"].verify_s = 0.002;
  SimSetup s;
  for (int k = 0; k < 8; ++k) s.tasks.push_back("arithmetic");
  double wall[3];
  const char* modes[] = {"sequential_sync", "multi_tenant_sync", "async"};
  for (int m = 0; m < 3; ++m) {
    s.mode = modes[m];
    auto r = Simulate(s, p);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->complete);
    EXPECT_EQ(r->train_steps > 0, true);
    wall[m] = r->wall_s;
  }
  EXPECT_GT(wall[0], 2 * wall[1]);  // batching 8 tenants
  EXPECT_LT(wall[2], wall[1]);      // and overlapping the stages
  // One core shared by rollout, trainer and verifier: async loses its overlap.
  p.cores = 1;
  s.mode = "async";
  auto one_core = Simulate(s, p);
  ASSERT_TRUE(one_core.ok());
  EXPECT_GT(one_core->wall_s, wall[2] * 1.05);
}

TEST(SimulatorTest, MoreDevicesFinishManyTenantsSoonerAndEveryStepIsTrained) {
  CostProfile p = SimpleProfile();
  p.placement = "accelerator";
  p.host_cores = 64;
  p.rollout.c = {0.004, 2e-4, 1e-5, 1e-4};
  p.trainer.c = {0.02, 5e-4, 1e-5, 1e-3};
  SimSetup s;
  s.mode = "async";
  for (int k = 0; k < 256; ++k) s.tasks.push_back("arithmetic");
  double last = 0;
  for (int gpus : {1, 8, 32}) {
    s.gpus = gpus;
    auto r = Simulate(s, p);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->complete);
    EXPECT_EQ(r->samples, 256u * 8u * 2u * 4u);
    if (last > 0) {
      EXPECT_LT(r->wall_s, last / 2) << gpus << " gpus";
    }
    last = r->wall_s;
  }
}

TEST(SimulatorTest, ToolCallsAndEnvironmentLatencyStretchTheRun) {
  CostProfile p = SimpleProfile();
  p.tasks["arithmetic"].tool_calls = 1;
  p.tasks["arithmetic"].tool_s = 0.001;
  SimSetup s;
  s.mode = "async";
  s.tasks = {"arithmetic", "arithmetic"};
  auto plain = Simulate(s, p);
  s.env_latency_ms = 200;
  auto remote = Simulate(s, p);
  ASSERT_TRUE(plain.ok() && remote.ok());
  // Every step waits at least for one tool round trip and one scoring round trip of ~200 ms.
  EXPECT_GT(remote->wall_s, plain->wall_s + s.steps * 0.3);
}

// Completions of a group that make the same tool call with the same context resume together
// with equal contexts, which model::Generator computes once: the simulator prefills them once.
TEST(SimulatorTest, SiblingsSharingAToolCallsContextResumeAsOneComputation) {
  CostProfile p = SimpleProfile();
  p.rollout.c = {0.01, 0, 0.001, 0};  // 10 ms a pass and 1 ms a computed token
  TaskCost& t = p.tasks["arithmetic"];
  t.tool_calls = 1;  // every completion calls a tool 4 tokens in (80% of 5)
  SimSetup s;
  s.mode = "sequential_sync";
  s.tasks = {"arithmetic"};
  s.steps = 4;
  auto distinct = Simulate(s, p);
  t.shared_tool_calls = 0.75;  // the three later calls of each group share the first's context
  auto shared = Simulate(s, p);
  t.shared_tool_calls = 0.375;  // half of them
  auto half = Simulate(s, p);
  ASSERT_TRUE(distinct.ok() && shared.ok() && half.ok());
  ASSERT_TRUE(distinct->complete && shared->complete && half->complete);
  EXPECT_EQ(shared->forward_passes, distinct->forward_passes);
  // Each of the 8 groups resumes three contexts fewer: prompt 10 + 4 generated + 12 result
  // tokens each.
  EXPECT_NEAR(distinct->wall_s - shared->wall_s, 8 * 3 * (10 + 4 + 12) * 0.001, 1e-9);
  EXPECT_GT(half->wall_s, shared->wall_s + 0.026);
  EXPECT_LT(half->wall_s, distinct->wall_s - 0.026);
}

// With calls in only some completions, the simulated share still reproduces the measured one,
// up to what drawing each completion's call on its own allows: with a call in half of them and
// groups of 4, (2 - 15/16) / 2 of the calls come after their group's first.
TEST(SimulatorTest, TheSimulatedShareOfToolCallsIsTheMeasuredOneUpToWhatCanBeReproduced) {
  CostProfile p = SimpleProfile();
  TaskCost& t = p.tasks["arithmetic"];
  t.tool_calls = 0.5;
  EXPECT_DOUBLE_EQ(ReproducibleShare(t, 4), (2 - 15.0 / 16) / 2);
  EXPECT_DOUBLE_EQ(ReproducibleShare(t, 1), 0);  // one completion a group: nothing to share
  TaskCost none = t;
  none.tool_calls = 0;
  EXPECT_DOUBLE_EQ(ReproducibleShare(none, 4), 0);
  SimSetup s;
  s.mode = "multi_tenant_sync";
  s.tasks = std::vector<std::string>(8, "arithmetic");
  s.steps = 50;  // 800 groups, about 1600 calls
  auto share_of = [&](double measured) {
    t.shared_tool_calls = measured;
    auto r = Simulate(s, p);
    EXPECT_TRUE(r.ok() && r->complete) << r.status().ToString();
    if (!r.ok()) return -1.0;
    EXPECT_GT(r->tool_calls, 1400u);
    return double(r->tool_calls_shared) / double(r->tool_calls);
  };
  EXPECT_NEAR(share_of(0.3), 0.3, 0.04);
  EXPECT_NEAR(share_of(0.5), 0.5, 0.04);
  EXPECT_NEAR(share_of(0.9), ReproducibleShare(t, 4), 0.04);  // more than can be: all it can
  EXPECT_EQ(share_of(0), 0);
}

// A profile of an hour per row and per token (each term allowed: up to an hour), with the
// service's polls every few milliseconds, was simulated for hours: the simulator gives up at its
// event bound (here after a few seconds).
TEST(SimulatorTest, ASimulationTooLongToRunEndsAtItsEventBound) {
  CostProfile p = SimpleProfile();
  p.rollout.c = {3600, 3600, 3600, 3600, 0};
  SimSetup s;
  s.tasks = {"arithmetic", "arithmetic"};
  auto r = Simulate(s, p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_NE(r.status().message().find("too large to simulate"), std::string::npos);
}

TEST(SimulatorTest, BadSetupsAreRefusedByName) {
  const CostProfile p = SimpleProfile();
  SimSetup s;
  s.tasks = {"countdown"};
  auto r = Simulate(s, p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("countdown"), std::string::npos);
  s.tasks = {"arithmetic"};
  s.mode = "lockstep";
  EXPECT_FALSE(Simulate(s, p).ok());
}

TEST(SimMeasuredRunTest, RoundTripsThroughJsonAndCalibratesTheTasks) {
  MeasuredRun m;
  m.mode = "async";
  m.tenants = 2;
  m.seed = 1;
  m.complete = true;
  m.wall_s = 3;
  m.tasks = {"arithmetic", "calculator_tool"};
  m.steps = 8;
  m.group_size = 4;
  m.prompts_per_step = 2;
  m.max_staleness = 1;
  m.checkpoint_every = 8;
  m.costs.checkpoints = 2;
  m.costs.checkpoint_ns = 2 * 5'000'000;
  m.costs.admissions = 2;
  m.costs.admit_ns = 2 * 1'500'000;
  m.costs.settles = 2;
  m.costs.settle_ns = 2 * 2'500'000;
  m.verifier_workers = 2;
  for (int i = 1; i <= 10; ++i) {
    m.costs.rollout.Add(i, 2 * i, 1, 0, 0.001 * i);
    m.costs.trainer.Add(4 * i, 40 * i, 1, i % 2, 0.01 + 0.001 * i + 0.005 * (i % 2));
  }
  TaskCostSums& calc = m.costs.tasks["calculator_tool"];
  calc.groups_started = 16;
  calc.prompt_tokens = 16 * 60;
  calc.completions = 64;
  calc.completion_tokens = 64 * 36;
  calc.groups_scored = 16;
  calc.work_ns = 16 * 2'000'000;
  calc.tool_calls = 64;
  calc.tool_ns = 64 * 3'000'000;
  calc.tool_calls_shared = 40;
  calc.prefix_rows_trained = 12;  // one a trained group
  calc.prefix_tokens_trained = 12 * 64;
  calc.groups_trained = 16;
  calc.groups_degenerate = 4;
  calc.rows_trained = 48;
  calc.tokens_trained = 48 * 90;
  calc.padded_tokens_trained = 48 * 100;  // the simulator pads as the trainer did
  auto back = MeasuredRunFromJson(MeasuredRunToJson(m), "run 0");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tasks, m.tasks);
  EXPECT_EQ(back->costs.rollout.n, 10u);
  EXPECT_EQ(back->costs.tasks.at("calculator_tool").tool_ns, calc.tool_ns);
  auto p = CalibrateProfile({*back}, 2, "t");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const TaskCost& t = p->tasks.at("calculator_tool");
  EXPECT_DOUBLE_EQ(t.prompt_tokens, 60);
  EXPECT_DOUBLE_EQ(t.completion_tokens, 36);
  EXPECT_DOUBLE_EQ(t.tool_calls, 1);
  EXPECT_DOUBLE_EQ(t.shared_tool_calls, 40.0 / 64);
  MeasuredRun unshared = *back;  // pooled with a run that shared none: 40 of 128 calls
  unshared.costs.tasks["calculator_tool"].tool_calls_shared = 0;
  auto pooled = CalibrateProfile({*back, unshared}, 2, "t");
  ASSERT_TRUE(pooled.ok()) << pooled.status().ToString();
  EXPECT_DOUBLE_EQ(pooled->tasks.at("calculator_tool").shared_tool_calls, 40.0 / 128);
  EXPECT_NEAR(t.verify_s, 0.002, 1e-12);
  EXPECT_NEAR(t.tool_s, 0.003, 1e-12);
  EXPECT_DOUBLE_EQ(t.degenerate, 0.25);
  EXPECT_DOUBLE_EQ(t.trained_tokens, 100);
  EXPECT_DOUBLE_EQ(t.prompt_rows, 0.25);
  EXPECT_DOUBLE_EQ(t.prompt_row_tokens, 64);
  EXPECT_NEAR(p->rollout.Seconds(5, 10, 1, false), 0.005, 1e-9);
  // Every other training step was cold (after an idle gap) and cost 5 ms more: the cold term.
  EXPECT_NEAR(p->trainer.Seconds(8, 80, 1, false), 0.012, 1e-9);
  EXPECT_NEAR(p->trainer.Seconds(8, 80, 1, true), 0.017, 1e-9);
  EXPECT_NEAR(p->checkpoint_s, 0.005, 1e-12);
  EXPECT_NEAR(p->admit_s, 0.0015, 1e-12);
  EXPECT_NEAR(p->settle_s, 0.0025, 1e-12);
  nlohmann::json older = MeasuredRunToJson(m);  // before admissions were timed
  older["costs"].erase("admissions");
  older["costs"].erase("admit_ns");
  auto old = MeasuredRunFromJson(older, "run 2");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->costs.admit_ns, 0u);
  older["costs"]["tasks"]["calculator_tool"].erase("tool_calls_shared");  // before it was counted
  old = MeasuredRunFromJson(older, "run 2");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->costs.tasks.at("calculator_tool").tool_calls_shared, 0u);
  EXPECT_EQ(back->costs.tasks.at("calculator_tool").tool_calls_shared, 40u);
  EXPECT_EQ(back->costs.tasks.at("calculator_tool").prefix_tokens_trained, 12u * 64);
  older["costs"]["tasks"]["calculator_tool"].erase("prefix_rows_trained");
  older["costs"]["tasks"]["calculator_tool"].erase("prefix_tokens_trained");
  old = MeasuredRunFromJson(older, "run 2");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  auto old_profile = CalibrateProfile({*old}, 2, "t");  // bucketed by the whole row, as before
  ASSERT_TRUE(old_profile.ok());
  EXPECT_EQ(old_profile->tasks.at("calculator_tool").prompt_rows, 0);
  EXPECT_EQ(back->checkpoint_every, 8);
  nlohmann::json four_terms = MeasuredRunToJson(m);  // an older build, without the cold term
  four_terms["costs"]["rollout"]["xty"].erase(4);
  auto refused_four = MeasuredRunFromJson(four_terms, "run 4");
  ASSERT_FALSE(refused_four.ok());
  EXPECT_NE(refused_four.status().message().find("cold-start"), std::string::npos)
      << refused_four.status().ToString();
  nlohmann::json unweighted = MeasuredRunToJson(m);
  unweighted["costs"]["trainer"].erase("weights");  // as an older build wrote them
  auto refused = MeasuredRunFromJson(unweighted, "run 3");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("costs.trainer.weights"), std::string::npos)
      << refused.status().ToString();
  // A count must be a whole number >= 0: a negative one (nlohmann would turn -1 into 2^64 - 1)
  // or a mistyped one is refused by name, missing ones where they are required.
  for (const char* where : {"admissions", "tasks.calculator_tool.tool_ns", "checkpoints"}) {
    for (const nlohmann::json& value :
         {nlohmann::json(-1), nlohmann::json("7"), nlohmann::json(1.5), nlohmann::json()}) {
      nlohmann::json bent = MeasuredRunToJson(m);
      nlohmann::json& c = bent["costs"];
      nlohmann::json& o =
          std::string(where).rfind("tasks.", 0) == 0 ? c["tasks"]["calculator_tool"] : c;
      const std::string key = std::string(where).substr(std::string(where).rfind('.') + 1);
      if (value.is_null()) {
        o.erase(key);
      } else {
        o[key] = value;
      }
      auto r = MeasuredRunFromJson(bent, "run 5");
      if (value.is_null() && key == "admissions") {  // optional: older files lack it
        EXPECT_TRUE(r.ok()) << r.status().ToString();
        continue;
      }
      ASSERT_FALSE(r.ok()) << where << " = " << value.dump();
      EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().ToString();
      EXPECT_NE(r.status().message().find("run 5"), std::string::npos);
    }
  }
  // The set-up's numbers are whole and within what a run can have: get<int>() took 2.7 tenants
  // as 2 and 2^32 + 8 steps as 8, and 2e9 steps were simulated for hours.
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"tenants", 2.7},
                                                           {"steps", 4294967304.0},
                                                           {"steps", 2000000000},
                                                           {"prompts_per_step", 100000000},
                                                           {"seed", -1},
                                                           {"group_size", 0},
                                                           {"wall_s", 1e-300},
                                                           {"util_rollout", -5},
                                                           {"env_latency_ms", "0"}}) {
    nlohmann::json bent = MeasuredRunToJson(m);
    bent[key] = value;
    auto r = MeasuredRunFromJson(bent, "run 6");
    ASSERT_FALSE(r.ok()) << key << " = " << value.dump();
    EXPECT_NE(r.status().message().find("run 6: run." + key), std::string::npos)
        << r.status().ToString();
  }
  nlohmann::json overflowing = MeasuredRunToJson(m);
  overflowing["costs"]["rollout"]["xtx"][1][1] = 1e308;
  auto too_big = MeasuredRunFromJson(overflowing, "run 8");
  ASSERT_FALSE(too_big.ok());
  EXPECT_NE(too_big.status().message().find("costs.rollout"), std::string::npos)
      << too_big.status().ToString();
  nlohmann::json broken = MeasuredRunToJson(m);
  broken.erase("steps");
  auto bad = MeasuredRunFromJson(broken, "run 7");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("run 7"), std::string::npos);
  EXPECT_NE(bad.status().message().find("steps"), std::string::npos);
}

// Repeats of one set-up and seed are one validation row, checked on their mean wall time with
// their task costs pooled; another seed is a row of its own.
TEST(SimValidationTest, RepeatsOfASetUpAreOneRowCheckedOnTheirMean) {
  const CostProfile p = SimpleProfile();
  MeasuredRun m;
  m.mode = "sequential_sync";
  m.tenants = 1;
  m.seed = 1;
  m.complete = true;
  m.tasks = {"arithmetic"};
  m.steps = 4;
  m.group_size = 4;
  m.prompts_per_step = 2;
  m.max_staleness = 0;
  m.checkpoint_every = 10;
  m.verifier_workers = 2;
  TaskCostSums& a = m.costs.tasks["arithmetic"];
  a.groups_started = a.groups_scored = a.groups_trained = 8;
  a.prompt_tokens = 8 * 10;
  a.completions = 32;
  a.completion_tokens = 32 * 5;
  a.rows_trained = 32;
  a.tokens_trained = a.padded_tokens_trained = 32 * 15;
  m.costs.rollout.Add(8, 8, 1, 0, 0.01);
  std::vector<MeasuredRun> runs(3, m);
  runs[0].wall_s = 1.0;
  runs[1].wall_s = 3.0;
  runs[2].wall_s = 1.5;
  runs[2].seed = 2;
  auto rows = Validate(runs, p);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  const ValidationRow& first = (*rows)[0];
  EXPECT_EQ(first.runs, 2);
  EXPECT_DOUBLE_EQ(first.measured.wall_s, 2.0);
  EXPECT_DOUBLE_EQ(first.wall_min_s, 1.0);
  EXPECT_DOUBLE_EQ(first.wall_max_s, 3.0);
  EXPECT_EQ(first.measured.costs.tasks.at("arithmetic").groups_started, 16u);  // pooled
  EXPECT_EQ(first.measured.costs.rollout.n, 2u);
  // The simulated run (see OneSequentialTenantTakesTheSumOfItsStagesAndPolls) against the mean.
  const double expected = 0.001 + 0.001 + 4 * (5 * 0.01 + 0.2 + 2 * 0.00015) + 3 * 0.00025 + 0.001;
  EXPECT_NEAR(first.predicted.wall_s, expected, 1e-9);
  EXPECT_NEAR(first.error, (expected - 2.0) / 2.0, 1e-9);
  EXPECT_EQ((*rows)[1].runs, 1);
  EXPECT_DOUBLE_EQ((*rows)[1].measured.wall_s, 1.5);
  const auto targets = ValidationTargets(*rows, 0.15);
  ASSERT_EQ(targets.size(), 1u);                                           // one tenant count
  EXPECT_NEAR(targets[0].value, std::fabs((expected - 2.0) / 2.0), 1e-9);  // the larger error

  // A row replays its own runs' file writes (their fsync latency), not the profile's: the
  // profile says nothing about them here, these runs' admission took 20 ms, their settle 30 ms
  // and their checkpoint (after the last step) 50 ms on average.
  for (MeasuredRun& r : runs) {
    r.costs.admissions = r.costs.settles = r.costs.checkpoints = 1;
    r.costs.admit_ns = 20'000'000;
    r.costs.settle_ns = 30'000'000;
    r.costs.checkpoint_ns = 50'000'000;
  }
  runs[1].costs.checkpoint_ns = 150'000'000;  // the same set-up: pooled, (50 + 150) / 2
  auto own = Validate(runs, p);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_NEAR((*own)[0].predicted.wall_s, expected + 0.02 + 0.03 + 0.1, 1e-9);
  EXPECT_NEAR((*own)[1].predicted.wall_s, expected + 0.02 + 0.03 + 0.05, 1e-9);
  EXPECT_EQ(p.checkpoint_s, 0);  // the profile itself is left as it was
}

// The speed-up column compares with sequential_sync at the same tenants and GPUs; without such a
// row it says "-" (it said "0.00x", which reads as a result).
TEST(SimReportTest, TheSpeedUpColumnNeedsASequentialRowToCompareWith) {
  ProjectionRow seq{"sequential_sync", 32, 1, {}}, async{"async", 32, 1, {}},
      alone{"async", 64, 1, {}};
  seq.result.wall_s = 100;
  async.result.wall_s = 20;
  alone.result.wall_s = 30;
  for (ProjectionRow* r : {&seq, &async, &alone}) r->result.complete = true;
  const std::string table = ProjectionTable({seq, async, alone});
  std::istringstream lines(table);
  std::vector<std::string> rows;
  for (std::string line; std::getline(lines, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 4u) << table;
  EXPECT_NE(rows[1].find(" 1.00x"), std::string::npos) << table;
  EXPECT_NE(rows[2].find(" 5.00x"), std::string::npos) << table;
  EXPECT_EQ(rows[3].find("x"), std::string::npos) << table;
  EXPECT_EQ(rows[3].back(), '-') << table;
}

}  // namespace
}  // namespace marlaas::sim

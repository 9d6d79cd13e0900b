// AddGroupToStep, the trainer's batching of a scored group into a tenant's step: a group with a
// signal adds its trajectories with their advantages; a degenerate one adds nothing and counts its
// trained tokens as skipped, unless the step has a KL term, which needs them (advantage 0); a
// malformed trajectory is left out.
#include "procs/trainer/step_groups.h"

#include <gtest/gtest.h>

namespace marlaas::trainer {
namespace {

pb::TrajectoryGroup Group(const std::vector<float>& rewards) {
  pb::TrajectoryGroup g;
  for (size_t i = 0; i < rewards.size(); ++i) {
    pb::Trajectory* tr = g.add_trajectories();
    tr->set_reward(rewards[i]);
    // 2 prompt tokens, then 1 + i generated ones.
    for (size_t k = 0; k < 3 + i; ++k) {
      tr->add_tokens(int32_t(10 + k));
      tr->add_behaviour_logprobs(k < 2 ? 0.0f : -1.0f);
      tr->mutable_loss_mask()->push_back(k < 2 ? 0 : 1);
    }
  }
  return g;
}

TEST(StepGroupsTest, AGroupWithASignalAddsItsTrajectoriesWithTheirAdvantages) {
  rl::TenantStep step;
  EXPECT_FALSE(AddGroupToStep(Group({1, 0, 0, 1}), /*normalize_std=*/false, &step));
  ASSERT_EQ(step.completions.size(), 4u);
  EXPECT_EQ(step.completions[0].advantage, 0.5f);
  EXPECT_EQ(step.completions[1].advantage, -0.5f);
  EXPECT_EQ(step.completions[3].tokens.size(), 6u);
  EXPECT_EQ(step.completions[3].loss_mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(step.skipped_tokens, 0);
}

TEST(StepGroupsTest, ADegenerateGroupCountsItsTokensAsSkippedWithoutKl) {
  rl::TenantStep step;
  EXPECT_TRUE(AddGroupToStep(Group({1, 1, 1}), false, &step));
  EXPECT_TRUE(step.completions.empty());
  EXPECT_EQ(step.skipped_tokens, 1 + 2 + 3);  // the generated tokens of its three trajectories
  // A second one adds to the count.
  EXPECT_TRUE(AddGroupToStep(Group({0, 0}), false, &step));
  EXPECT_EQ(step.skipped_tokens, 6 + 1 + 2);
  // A malformed trajectory counts no tokens there either (as it adds none with a signal).
  pb::TrajectoryGroup bad = Group({1, 1});
  bad.mutable_trajectories(1)->set_prompt_tokens(3);  // trains on token 2 of its prompt
  EXPECT_TRUE(AddGroupToStep(bad, false, &step));
  EXPECT_EQ(step.skipped_tokens, 9 + 1);
}

TEST(StepGroupsTest, WithAKlTermADegenerateGroupIsTrainedWithAdvantageZero) {
  rl::TenantStep step;
  step.grpo.kl_beta = 0.1f;
  EXPECT_TRUE(AddGroupToStep(Group({1, 1, 1}), true, &step));
  ASSERT_EQ(step.completions.size(), 3u);
  for (const rl::Completion& c : step.completions) EXPECT_EQ(c.advantage, 0.0f);
  EXPECT_EQ(step.skipped_tokens, 0);
}

TEST(StepGroupsTest, AMalformedTrajectoryIsLeftOut) {
  pb::TrajectoryGroup g = Group({1, 0});
  g.mutable_trajectories(0)->add_tokens(99);  // one token more than log-probs and mask
  rl::TenantStep step;
  EXPECT_FALSE(AddGroupToStep(g, false, &step));
  ASSERT_EQ(step.completions.size(), 1u);
  EXPECT_EQ(step.completions[0].advantage, -0.5f);
}

// The policy is trained only on what it wrote: a trajectory whose mask covers its prompt or a
// tool's result, or whose tool result lies past its tokens, is left out; one with its result
// masked is kept.
TEST(StepGroupsTest, ATrajectoryTrainedOnItsPromptOrAToolResultIsLeftOut) {
  auto with_tool_turn = [](uint32_t start, uint32_t count) {
    pb::TrajectoryGroup g = Group({1, 0, 0});  // trajectory 2: prompt 0-1, written 2-4
    pb::Trajectory* tr = g.mutable_trajectories(2);
    tr->set_prompt_tokens(2);
    (*tr->mutable_loss_mask())[3] = 0;  // token 3: the tool's result
    pb::ToolTurn* turn = tr->add_tool_turns();
    turn->set_result_token_start(start);
    turn->set_result_token_count(count);
    return g;
  };
  rl::TenantStep kept;
  AddGroupToStep(with_tool_turn(3, 1), false, &kept);
  EXPECT_EQ(kept.completions.size(), 3u);
  for (auto [start, count] : {std::pair<uint32_t, uint32_t>{2, 2}, {4, 1}, {3, 5}}) {
    rl::TenantStep step;
    AddGroupToStep(with_tool_turn(start, count), false, &step);
    EXPECT_EQ(step.completions.size(), 2u) << "result at " << start << " +" << count;
  }
  pb::TrajectoryGroup g = Group({1, 0});
  g.mutable_trajectories(0)->set_prompt_tokens(3);  // token 2 is trained on: not its prompt
  rl::TenantStep step;
  AddGroupToStep(g, false, &step);
  ASSERT_EQ(step.completions.size(), 1u);
  EXPECT_EQ(step.completions[0].advantage, -0.5f);
  g.mutable_trajectories(0)->set_prompt_tokens(9);  // past its tokens
  rl::TenantStep past;
  AddGroupToStep(g, false, &past);
  EXPECT_EQ(past.completions.size(), 1u);
}

}  // namespace
}  // namespace marlaas::trainer

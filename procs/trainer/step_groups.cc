#include "procs/trainer/step_groups.h"

#include "rl/advantages.h"

namespace marlaas::trainer {

bool AddGroupToStep(const pb::TrajectoryGroup& g, bool normalize_std, rl::TenantStep* step) {
  std::vector<float> rewards;
  for (const pb::Trajectory& tr : g.trajectories()) rewards.push_back(tr.reward());
  const rl::GroupAdvantages adv = rl::ComputeAdvantages(rewards, normalize_std);
  if (adv.degenerate && step->grpo.kl_beta <= 0) {
    for (const pb::Trajectory& tr : g.trajectories())
      for (char m : tr.loss_mask()) step->skipped_tokens += m != 0;
    return true;
  }
  for (int i = 0; i < g.trajectories_size(); ++i) {
    const pb::Trajectory& tr = g.trajectories(i);
    rl::Completion c;
    c.tokens.assign(tr.tokens().begin(), tr.tokens().end());
    c.behaviour_logprobs.assign(tr.behaviour_logprobs().begin(), tr.behaviour_logprobs().end());
    c.loss_mask.assign(tr.loss_mask().begin(), tr.loss_mask().end());
    c.advantage = adv.degenerate ? 0.0f : adv.advantages[size_t(i)];
    if (c.tokens.size() != c.behaviour_logprobs.size() || c.tokens.size() != c.loss_mask.size())
      continue;  // malformed trajectory: it contributes nothing
    step->completions.push_back(std::move(c));
  }
  return adv.degenerate;
}

}  // namespace marlaas::trainer

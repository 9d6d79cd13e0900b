#include "procs/trainer/step_groups.h"

#include "rl/advantages.h"

namespace marlaas::trainer {
namespace {

// Whether the mask marks a token the policy did not write (its prompt or a tool's result) as
// trained on, or a tool turn's result lies outside the tokens: either would push up text the
// policy never chose, with a behaviour log-prob of 0.
bool TrainsOnInput(const pb::Trajectory& tr) {
  const std::string& mask = tr.loss_mask();
  if (tr.prompt_tokens() > mask.size()) return true;
  for (uint32_t i = 0; i < tr.prompt_tokens(); ++i)
    if (mask[i] != 0) return true;
  for (const pb::ToolTurn& turn : tr.tool_turns()) {
    const uint64_t start = turn.result_token_start(), end = start + turn.result_token_count();
    if (turn.result_token_count() > 0 && end > mask.size()) return true;
    for (uint64_t i = start; i < end && i < mask.size(); ++i)
      if (mask[i] != 0) return true;
  }
  return false;
}

// Its tokens, log-probs and mask are aligned, and it trains only on what the policy wrote.
bool WellFormed(const pb::Trajectory& tr) {
  return tr.tokens_size() == tr.behaviour_logprobs_size() &&
         size_t(tr.tokens_size()) == tr.loss_mask().size() && !TrainsOnInput(tr);
}

}  // namespace

bool AddGroupToStep(const pb::TrajectoryGroup& g, bool normalize_std, rl::TenantStep* step) {
  std::vector<float> rewards;
  for (const pb::Trajectory& tr : g.trajectories()) rewards.push_back(tr.reward());
  const rl::GroupAdvantages adv = rl::ComputeAdvantages(rewards, normalize_std);
  if (adv.degenerate && step->grpo.kl_beta <= 0) {
    for (const pb::Trajectory& tr : g.trajectories()) {
      if (!WellFormed(tr)) continue;  // as left out of a group with a signal
      for (char m : tr.loss_mask()) step->skipped_tokens += m != 0;
    }
    return true;
  }
  for (int i = 0; i < g.trajectories_size(); ++i) {
    const pb::Trajectory& tr = g.trajectories(i);
    rl::Completion c;
    c.tokens.assign(tr.tokens().begin(), tr.tokens().end());
    c.behaviour_logprobs.assign(tr.behaviour_logprobs().begin(), tr.behaviour_logprobs().end());
    c.loss_mask.assign(tr.loss_mask().begin(), tr.loss_mask().end());
    c.advantage = adv.degenerate ? 0.0f : adv.advantages[size_t(i)];
    if (!WellFormed(tr)) continue;  // it contributes nothing
    step->completions.push_back(std::move(c));
  }
  return adv.degenerate;
}

}  // namespace marlaas::trainer

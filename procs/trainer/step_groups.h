// AddGroupToStep: how one scored GRPO group enters a tenant's training step (the trainer's
// batching, kept apart so it can be tested). Its advantages come from its rewards
// (rl::ComputeAdvantages). A group with a signal adds each well-formed trajectory as a completion.
// A degenerate group (every reward equal: advantage 0) has no policy gradient: without a KL term
// it is not computed, and its trained tokens go to step->skipped_tokens so that they still count
// in the step's token mean (rl/multi_tenant_step.h); with a KL term (kl_beta > 0) its
// trajectories are added with advantage 0, so the KL penalty on them is computed as the
// objective says. A trajectory whose tokens, log-probs and mask differ in length, or whose mask
// trains on its prompt or a tool's result (or places a result outside its tokens), contributes
// nothing. Returns whether the group was degenerate.
#pragma once

#include "proto/marlaas.pb.h"
#include "rl/multi_tenant_step.h"

namespace marlaas::trainer {

bool AddGroupToStep(const pb::TrajectoryGroup& group, bool normalize_std, rl::TenantStep* step);

}  // namespace marlaas::trainer

// The trainer stage (DESIGN.md §1): consumes scored GRPO groups from the verifier, keeps them per
// tenant, and whenever tenants have `prompts_per_step` groups ready trains all of them in one
// forward/backward (rl/multi_tenant_step.h), publishes each new adapter version to the adapter
// store, and checkpoints tenants to the state dir.
//
// Delivery: a scored-ring record is acknowledged only once the group it carries is covered by a
// checkpoint (trained or dropped, and saved), so a killed trainer resumes from its checkpoints and
// re-reads exactly the groups those do not cover. Group ids already retired are dropped as
// duplicates. Staleness: a group sampled by adapter version v is trained at version s only while
// s - v <= max_staleness; an older one is dropped with a logged reason (pacing in the rollout
// normally prevents it). Version numbers never go backwards: a tenant restored from an older
// checkpoint than the store's published version republishes it under a newer number.
// One thread.
#pragma once

#include <memory>

#include "base/status.h"
#include "procs/common/pipeline.h"

namespace marlaas::trainer {

// Runs the stage until StopRequested(); returns the error that stopped it early.
Status RunTrainer(const pipeline::StageArgs& args);

}  // namespace marlaas::trainer

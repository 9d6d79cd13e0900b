// The rollout stage (DESIGN.md §1): one base model, every running tenant's adapter, continuous
// batching across tenants (model/generator.h). For each tenant it samples GRPO groups
// (group_size completions of one training prompt, all with the adapter version current when the
// group starts) and commits each finished group to the verifier's ring as one record, in the
// order the tenant's groups started.
//  - Pacing: a tenant has at most (max_staleness + 1) * prompts_per_step groups between "started
//    here" and "retired by the trainer" (trained or dropped, read from the trainer's metrics), so
//    the staleness bound holds without discarding work.
//  - Adapter swap: when the trainer publishes a newer version, the tenant's later groups use it;
//    sequences already running keep theirs; other tenants never pause.
//  - Tool calls: a sequence that emits </tool> is parked, its call goes to the verifier, and it
//    resumes with <result>...</result> appended when the result comes back (those tokens are
//    masked out of the loss). A call unanswered for the tenant's tool_result_timeout_ms
//    (default 30 s) fails its group with that reason; a result that comes later is ignored.
//  - Restart: group ids carry the ring's producer incarnation, so they stay unique; counters and
//    the data cursor resume from this stage's metrics segment.
// One thread.
#pragma once

#include "base/status.h"
#include "procs/common/pipeline.h"

namespace marlaas::rollout {

Status RunRollout(const pipeline::StageArgs& args);

}  // namespace marlaas::rollout

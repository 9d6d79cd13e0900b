// The discrete-event simulator of the pipeline's scheduler (bench/sim, `marlaas bench sim`): the
// same tenants, stages and rules as the real processes, with each pass's cost taken from a
// CostProfile instead of computed, so that runs far larger than this machine can be projected.
//
// Modelled as the stages behave (procs/):
//  - rollout: continuous batching of up to max_active_sequences sequences; tenants served round
//    robin, one group a turn; async: a tenant's groups in flight (started, not yet retired by the
//    trainer) stay below (max_staleness + 1) * prompts_per_step; lockstep (the sync modes): a
//    round gives every running tenant one step's groups and the next round starts when all of
//    them are trained. Each pass costs rollout(rows, tokens, adapters); a joining sequence
//    prefills its prompt (once for a group), a tool call parks its sequence until the verifier's
//    result comes back and it rejoins with its whole context, computed once for the calls of a
//    group that share one (TaskCost::shared_tool_calls) and resume in the same pass, as
//    model::Generator computes equal joining contexts once. The rollout sees the trainer's progress
//    (retired groups, new adapters) when it syncs: while generating, after a pass during which the
//    trainer stepped one of its tenants and every 50 ms; idle, it sees a trainer step or a tool
//    result within 0.5 ms and a new tenant within 2 ms.
//  - verifier: `verifier_workers` workers, FIFO with at most workers - 1 jobs of one tenant
//    running; a group costs the task's verify_s, a tool call tool_s; with env latency a result
//    is released no sooner than a lognormal delay (median env_latency_ms, sigma 0.5) after the
//    record arrived, each tenant's groups in order and its tool results in order. A group takes
//    0.15 ms over each ring (rollout to verifier, verifier to trainer).
//  - trainer: one step for every tenant with prompts_per_step groups ready (lockstep: once every
//    group its round started has arrived), costing trainer(rows, tokens, tenants) with rows the
//    completions of its non-degenerate groups (each group is degenerate, all rewards equal, with
//    the task's measured share, drawn when it starts), tokens padded as rl::MultiTenantStep pads
//    them and tenants those with rows, plus checkpoint_s for each tenant it checkpoints; it
//    learns of admitted tenants by polling every 2 ms.
//  - cold passes: a rollout pass or a training step that trains (not one of only degenerate
//    groups) after its engine idled longer than CostSums::kColdAfterNs (or its first) adds the
//    profile's cold term, as the stages classify theirs.
//  - machine: "shared" placement runs rollout, trainer and verifier workers on `cores`
//    processors shared fairly (a stage slows down when more are busy than there are cores);
//    "accelerator" placement gives each rollout replica and trainer a device (with `gpus` devices:
//    max(1, gpus / 4) trainers, the rest rollout replicas; with one, both share it), tenants
//    spread over them round robin, and the verifier workers `host_cores` processors.
//  - sequential_sync admits the next tenant when the previous one has finished (the service's
//    2 ms tick), the others admit every tenant at the start, all of them visible once the last
//    is admitted; admitting costs the profile's admit_s a tenant. A finished tenant is seen at
//    the service's next tick and settled in settle_s (one at a time); the run ends when the
//    last is settled.
// Deterministic for a given SimSetup::seed. Not thread-safe (one Simulate call owns its state).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "bench/sim/cost_model.h"

namespace marlaas::sim {

struct SimSetup {
  std::string mode = "async";      // sequential_sync | multi_tenant_sync | async
  std::vector<std::string> tasks;  // one per tenant: keys of CostProfile::tasks
  int steps = 8, group_size = 4, prompts_per_step = 2, max_staleness = 1;
  int checkpoint_every = 10;  // a tenant's checkpoint every N steps and after its last
  int verifier_workers = 2;
  double env_latency_ms = 0;
  int gpus = 1;  // accelerator placement only
  uint64_t seed = 1;
  double timeout_s = 1e7;  // simulated seconds before giving up (result incomplete)

  // Every field equal (keep in step with the fields above): repeats of one measured set-up.
  bool operator==(const SimSetup& o) const {
    return std::tie(mode, tasks, steps, group_size, prompts_per_step, max_staleness,
                    checkpoint_every, verifier_workers, env_latency_ms, gpus, seed, timeout_s) ==
           std::tie(o.mode, o.tasks, o.steps, o.group_size, o.prompts_per_step, o.max_staleness,
                    o.checkpoint_every, o.verifier_workers, o.env_latency_ms, o.gpus, o.seed,
                    o.timeout_s);
  }
};

struct SimResult {
  bool complete = false;
  double wall_s = 0;
  // busy / wall: rollout and trainer per engine (mean over replicas / trainers); the verifier as
  // the measured one counts it, the sum over its workers
  double util_rollout = 0, util_trainer = 0, util_verifier = 0;
  uint64_t samples = 0, forward_passes = 0, train_steps = 0;
  // Tool calls drawn, and of those the ones that share a sibling's context
  uint64_t tool_calls = 0, tool_calls_shared = 0;
  int rollout_replicas = 1, trainers = 1;
};

// The largest share of a task's tool calls that the simulator can reproduce with groups of
// `group_size`. It draws each completion's call independently (chance task.tool_calls, at most
// 1), and only a group's calls after its first can share: of g*c expected calls, g*c -
// (1 - (1-c)^g). A measured share above this (calls that come together in a group, which the
// independent draw does not model) is replayed as this. 0 for a task without calls.
double ReproducibleShare(const TaskCost& task, int group_size);

// kInvalidArgument (naming the problem) for an unknown mode, a task the profile lacks, or
// non-positive sizes.
Result<SimResult> Simulate(const SimSetup& setup, const CostProfile& profile);

// The expected run: the mean of `replicates` runs seeded setup.seed, setup.seed + 1, ... (each
// draws its own sequence lengths, tool calls, degenerate groups and latencies); wall time,
// utilisations and counts averaged (counts rounded), complete only when every run is. With few
// tenants one run is one draw of a widely spread outcome (which of a 1-tenant run's 16 groups
// are degenerate decides which steps take no time); the mean is what a measurement estimates.
Result<SimResult> SimulateMean(const SimSetup& setup, const CostProfile& profile, int replicates);

}  // namespace marlaas::sim

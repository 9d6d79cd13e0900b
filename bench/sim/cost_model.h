// The simulator's cost model (bench/sim): what one pass of each pipeline stage costs, fitted from
// the cost sums a measured run recorded (shm/metrics.h CostSums, bench/sim/measured_run.h) or read
// from a JSON cost profile (for example one measured on a GPU), and the machine the stages share.
//
// Profile JSON (every field optional except rollout and trainer; unknown fields are refused):
//   {"name": "h200", "placement": "accelerator", "cores": 2, "host_cores": 32,
//    "max_active_sequences": 256, "adapter_sync_s": 0.0005, "checkpoint_s": 0.004,
//    "admit_s": 0.001, "settle_s": 0.002,
//    "rollout": [c0, c_rows, c_tokens, c_adapters, c_cold], seconds per packed forward
//    "trainer": [c0, c_rows, c_tokens, c_tenants, c_cold],  seconds per training step (padded
//                                                             tokens, tenants with rows to train)
//    (c_cold: added to a pass after its engine idled; a profile of 4 numbers has none)
//    "tasks": {"arithmetic": {"prompt_tokens": 12, "completion_tokens": 4, "tool_calls": 0,
//              "shared_tool_calls": 0, "verify_s": 0.0001, "tool_s": 0, "degenerate": 0.3,
//              "trained_tokens": 16, "prompt_rows": 0.25, "prompt_row_tokens": 11}, ...}}
// Pure functions and plain data.
#pragma once

#include <array>
#include <map>
#include <string>

#include "base/status.h"
#include "shm/metrics.h"

namespace marlaas::sim {

// seconds = c[0] + c[1]*x1 + c[2]*x2 + c[3]*x3 + c[4]*cold with every coefficient >= 0; `cold`
// is 1 for a pass after its engine idled (CostSums::kColdAfterNs), else 0.
struct LinearCost {
  std::array<double, CostSums::kTerms> c{};
  double Seconds(double x1, double x2, double x3, bool cold) const {
    return c[0] + c[1] * x1 + c[2] * x2 + c[3] * x3 + (cold ? c[4] : 0.0);
  }
};

// Weighted least squares (each pass weighted as CostSums::Add says) over every non-empty subset
// of the five terms (the constant, the three regressors and `cold`), keeping the subsets whose
// coefficients are all >= 0, and of those the one with the smallest residual: a regressor that did
// not vary, or that only adds noise, gets 0 instead of a wild value. The constant is a term like
// the others: when costs grow a little faster than linearly, the fit with the constant wants it
// below 0, and the fit without it is kept instead of the constant alone.
// kInvalidArgument when the sums hold fewer than two passes.
Result<LinearCost> FitLinearCost(const CostSums& sums);

// What a task's work looks like and costs, per prompt / completion / group.
struct TaskCost {
  double prompt_tokens = 16;     // tokens of a prompt
  double completion_tokens = 8;  // tokens generated per completion
  double tool_calls = 0;         // tool calls per completion
  double verify_s = 0;           // verifier work to score one group
  double tool_s = 0;             // verifier work for one tool call
  double degenerate = 0;         // fraction of groups whose rewards were all equal (not trained)
  // The share of tool calls whose context equals one an earlier completion of its group made
  // (TenantMetrics::tool_calls_shared): the same call at the same point, whose result resumes
  // its sequence in the same pass as the other's, where the two are computed once.
  double shared_tool_calls = 0;
  // Positions a trained row takes in its tenant's step (its share of the group's prompt, computed
  // once, and the rest padded to the step's longest). The simulated trainer buckets tenants by
  // it as rl::MultiTenantStep does.
  double trained_tokens = 24;
  // Of those, its shared prompts': prompt rows per trained row (one a group) and positions of one
  // (its tenant's longest). The rest is the row's own part, by which the trainer buckets tenants
  // and pads them to the bucket's longest; their prompt rows go to the bucket's longest prompt.
  // 0 (older runs): the trainer buckets and pads by trained_tokens as a whole.
  double prompt_rows = 0;
  double prompt_row_tokens = 0;
};

struct CostProfile {
  std::string name;
  LinearCost rollout;  // per packed forward: x = (rows, tokens, distinct adapters)
  LinearCost trainer;  // per training step: x = (rows, tokens, tenants stepped)
  std::map<std::string, TaskCost> tasks;
  // "shared": every engine and every verifier worker on one pool of `cores` processors, as on the
  // CPU machine the costs were measured on; "accelerator": each rollout replica and each trainer
  // on a device of its own, the verifier's workers on `host_cores` processors.
  std::string placement = "shared";
  int cores = 2;
  int host_cores = 2;
  int max_active_sequences = 96;  // per rollout replica (procs/rollout kMaxActiveSequences)
  double adapter_sync_s = 0;      // a published adapter reaches a rollout on another device
  double checkpoint_s = 0;        // the trainer writes one tenant's checkpoint
  double admit_s = 0;             // the service admits one tenant (before any stage sees it)
  double settle_s = 0;            // the service settles one finished tenant
};

Result<CostProfile> CostProfileFromJson(const std::string& text);  // errors name the field
std::string CostProfileToJson(const CostProfile& p);

}  // namespace marlaas::sim

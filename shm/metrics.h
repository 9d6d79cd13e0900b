// Metrics segments: one per stage process ("metrics.<role>", e.g. metrics.rollout), created by
// serve (or a test), written only by that stage, read by serve, the CLI and benchmarks. Every
// block is a SeqlockCell, so readers get consistent snapshots without slowing the writer. A
// restarted stage attaches to the same segment and keeps counting from the values it reads.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "shm/segment.h"
#include "shm/seqlock.h"
#include "shm/tenant_table.h"

namespace marlaas {

inline constexpr uint32_t kMetricsLayoutVersion = 8;
inline constexpr int kStalenessBuckets = 8;  // staleness 0..6, and >= 7

// Sums for a least-squares fit of a stage's cost per pass, seconds = c0 + c1*x1 + c2*x2 + c3*x3,
// from which the simulator (bench/sim) is calibrated. The regressors are stage-defined: rollout,
// one packed forward: rows (sequences), tokens, distinct adapters; trainer, one training step:
// completions, padded tokens (the positions of the padded batches it ran, rl/multi_tenant_step.h),
// tenants trained (with rows: a tenant whose groups were all degenerate steps without a forward,
// backward or optimizer step, and counting it would pin the per-tenant cost of a real one to
// that of such a step; the constant takes those). The seconds are the pass's CPU time
// (base/cpu_time.h), not its wall time: the simulator models the sharing of cores itself. Each pass
// is weighted by 1/seconds^2, so the fit minimises relative errors: a 2 ms step of a one-tenant run
// counts as much as a 200 ms batched one (unweighted, the large passes decide the line and small
// ones come out 2x off, while the simulator is judged on runs of every size). Plain data (it lives
// in shared memory).
struct CostSums {
  static constexpr int kTerms = 5;             // the constant, three regressors and `cold`
  static constexpr double kMinSeconds = 1e-5;  // weights are capped at 1/kMinSeconds^2
  // A pass is cold when its engine was idle for longer than this before it: it then pays for
  // what it lost while waiting (caches the other stages took, an idle core's wake-up). On the
  // 2-core machine the rollout's is about 0.4 ms. The trainer's was 5-7 ms (a 4-row step: 10-12
  // ms back to back, 15-17 ms after a lockstep wait) until the stages kept their freed heap
  // (base/heap.h): it was page faults of a heap trimmed after each step; it now fits to about 0.
  static constexpr int64_t kColdAfterNs = 1'000'000;
  uint64_t n;                  // passes added
  double xtx[kTerms][kTerms];  // sum of w x x^T, x = (1, x1, x2, x3, cold), w = 1/seconds^2
  double xty[kTerms];          // sum of w x seconds
  double yy;                   // sum of w seconds^2

  // `cold`: 1 for a pass after more than kColdAfterNs idle that computes (the trainer: not a step
  // of only degenerate groups), else 0.
  void Add(double x1, double x2, double x3, double cold, double seconds) {
    const double x[kTerms] = {1.0, x1, x2, x3, cold};
    const double clamped = seconds > kMinSeconds ? seconds : kMinSeconds;
    const double w = 1.0 / (clamped * clamped);
    ++n;
    for (int i = 0; i < kTerms; ++i) {
      for (int j = 0; j < kTerms; ++j) xtx[i][j] += w * x[i] * x[j];
      xty[i] += w * x[i] * seconds;
    }
    yy += w * seconds * seconds;
  }
  void Merge(const CostSums& o) {
    n += o.n;
    for (int i = 0; i < kTerms; ++i) {
      for (int j = 0; j < kTerms; ++j) xtx[i][j] += o.xtx[i][j];
      xty[i] += o.xty[i];
    }
    yy += o.yy;
  }
};

struct EngineMetrics {
  int64_t started_mono_ns;  // when the current process began
  int64_t updated_mono_ns;  // last update
  uint64_t busy_ns;         // time spent computing (utilisation = busy / wall)
  uint64_t items;           // records/tokens handled, stage-defined
  uint64_t queue_depth;     // input waiting, stage-defined
  uint64_t restarts;        // how many times this stage was restarted
  uint64_t errors;
  CostSums cost;  // per pass (see CostSums); passes before a restart included
  // Trainer: tenant checkpoints written and the time they took (not in `cost`: a step's cost is
  // fitted without the checkpoints it happened to write).
  uint64_t checkpoints;
  uint64_t checkpoint_ns;
};

struct TenantMetrics {
  uint64_t generation;  // TenantRecord::generation these counters belong to
  uint64_t samples;     // rollout: completions committed; verifier: scored; trainer: trained rows
  uint64_t tokens;      // rollout: tokens generated; trainer: tokens of the rows it trained
  uint64_t steps;
  uint64_t adapter_version;
  uint64_t reward_count;
  double reward_sum;
  double reward_sq_sum;
  uint64_t verifier_errors;
  uint64_t staleness[kStalenessBuckets];
  // GRPO groups: rollout = committed to its ring; verifier = scored; trainer = trained.
  uint64_t groups;
  uint64_t groups_dropped;     // trainer: dropped with a logged reason (failed, stale, finished)
  uint64_t cursor;             // rollout: next prompt index; trainer: past the last trained prompt
  uint64_t groups_degenerate;  // trainer: trained groups whose rewards were all equal (no signal)
  double last_reward_mean;     // trainer: mean reward of the last step's groups
  // Costs by tenant, for the simulator's calibration. Rollout: prompt_tokens of the groups it
  // started (one prompt per group); verifier: work_ns of its scoring jobs, tool_ns of its tool
  // calls and tool_calls run, as CPU time (the worker thread's and its sandbox runs' process
  // trees: a sandboxed run's wall time would count waiting for a core, which the simulator adds).
  uint64_t prompt_tokens;
  uint64_t work_ns;
  uint64_t tool_ns;
  uint64_t tool_calls;
  // Trainer: positions computed for its trained rows in a batch of their own: each row's part
  // after its shared prompt padded to the step's longest, plus each shared prompt once
  // (rl::TenantStepResult::own_padded_tokens; the simulator buckets tenants by it per row).
  uint64_t padded_tokens;
  // Trainer: of padded_tokens, its shared prompts' rows and their positions
  // (rl::TenantStepResult::own_prefix_rows, own_prefix_tokens): the rest is its rows, each
  // padded to its longest suffix, which the trainer buckets tenants by.
  uint64_t prefix_rows;
  uint64_t prefix_tokens;
  // Rollout: tool calls made with the same context (prompt and every token since) as a call an
  // earlier completion of the same group made. A deterministic tool that answers gives them
  // equal results (a failed or timed-out call need not); resumed in one pass, only one of them
  // is computed (model::Generator), which the simulator models.
  uint64_t tool_calls_shared;
  // Trainer: the steps its newest saved checkpoint holds. serve settles a tenant as finished
  // only once they are all its steps: a final checkpoint that failed (a full disk) left it
  // "finished" with its last steps lost.
  uint64_t checkpointed_steps;
  // The latest problem of this tenant in this stage ("" when none); the rollout sets it only when
  // it cannot serve the tenant at all, which fails the tenant.
  char last_error[96];
};

struct MetricsLayout {
  SeqlockCell<EngineMetrics> engine;
  SeqlockCell<TenantMetrics> tenants[kMaxTenants];
};

class MetricsSegment {
 public:
  static Result<MetricsSegment> Create(const std::string& instance, const std::string& role);
  static Result<MetricsSegment> Attach(const std::string& instance, const std::string& role);

  // Writer (the stage named by `role`) only.
  void StoreEngine(const EngineMetrics& m) { layout_->engine.Store(m); }
  Status StoreTenant(int row, const TenantMetrics& m);

  Result<EngineMetrics> LoadEngine() const;
  Result<TenantMetrics> LoadTenant(int row) const;

 private:
  explicit MetricsSegment(Segment seg)
      : segment_(std::move(seg)), layout_(static_cast<MetricsLayout*>(segment_.payload())) {}
  Segment segment_;
  MetricsLayout* layout_;
};

}  // namespace marlaas

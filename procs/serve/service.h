// Service: the supervisor (DESIGN.md §1, "serve"). It creates the instance's shared segments
// (tenant table, adapter store, metrics, the rings: a trajectory and a tool ring per rollout
// replica, one scored ring), spawns the rollout replicas (options.stage.rollout_replicas), the
// verifier and the trainer processes, restarts any that exits within a second (a stage that keeps
// crashing is restarted with a growing delay, capped at 1 s; after kGiveUpAfterCrashes exits in a
// row without staying up 10 s, it gives up and says why in failure()), admits tenants from job
// specs, marks
// them finished when the trainer reports max_steps (or failed when their verifier keeps failing),
// and removes the segments when it stops. One service per state dir: Start() takes
// <state>/service.lock, which the stage processes inherit, so a restarted service waits until the
// dead one's stages are gone too. A tenant's final state (finished, stopped, failed and why) is
// kept in <state>/tenants/<id>/state. A Service object is driven by one thread: call Tick() often
// (every ~50 ms).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "procs/common/pipeline.h"
#include "shm/metrics.h"
#include "shm/tenant_table.h"

namespace marlaas::serve {

struct ServiceOptions {
  pipeline::StageArgs stage;  // instance, state dir, model dir, threads, workers, weak sandbox
  std::string bin_dir;        // where marlaas-rollout etc. live (default: next to this program)
  // Tenants running at a time, and adapter store slots. A settled (finished, stopped, failed)
  // tenant's row and slot go to a later tenant when no free one is left.
  int max_tenants = 64;
  // Admission: the summed EstimateTenantBytes (admission.h) of the tenants not yet finished,
  // stopped or failed may not exceed this (0: no budget).
  uint64_t memory_budget_bytes = 0;
  std::string memory_budget_source;  // how the budget was set, for the refusal message
  // A running stage whose engine metrics have not been updated for this long (a hung process:
  // stopped, deadlocked, stuck in a device call) is killed and restarted like a crashed one
  // (0: never). Stages update them at least every loop, and the trainer also after each
  // checkpoint and each tenant it starts; a trainer step longer than this would be taken for a
  // hang. Quiet time is what serve itself observed: a pause of serve (Ctrl-Z, a frozen cgroup)
  // starts it again. A stage killed for a stall kGiveUpAfterStalls times in a row, without a
  // process of it running a whole timeout in between, is the service's failure.
  int64_t stall_timeout_ms = 300'000;
};

// One row of `Status()`: the table row plus the three stages' counters for the tenant.
struct TenantView {
  int row = -1;
  TenantRecord record{};
  TenantMetrics rollout{}, verifier{}, trainer{};
};

struct StageView {
  std::string role;  // rollout, verifier, trainer
  std::string name;  // the role, or "rollout.R" for rollout replica R > 0 (its metrics and log)
  pid_t pid = 0;
  int restarts = 0;
  EngineMetrics engine{};
};

// A tenant whose verifier failed this many groups, and more than twice as many as it scored, is
// marked failed with the verifier's last error as the reason.
inline constexpr uint64_t kFailAfterVerifierErrors = 8;

// A stage that exits this many times in a row, each time within 10 s of its start, is not
// restarted again: the service has failed (Service::failure()). About 5 s of restarts with the
// back-off; a stage that cannot start (no model, a broken binary) would otherwise be restarted
// forever while its tenants wait.
inline constexpr int kGiveUpAfterCrashes = 8;
// See ServiceOptions::stall_timeout_ms.
inline constexpr int kGiveUpAfterStalls = 3;

class Service {
 public:
  static Result<std::unique_ptr<Service>> Start(const ServiceOptions& options);
  ~Service();  // Stop()

  // Validates the spec (a custom task's dataset is read and checked), writes
  // <state>/tenants/<id>/job.json and makes the tenant running. kAlreadyExists for an id that is
  // running or that the state dir already holds (a finished, stopped or failed tenant's, or one
  // ResumeTenants left on disk). Nothing changes when it fails.
  Status Admit(const pb::JobSpec& spec);
  // What Admit checks before it looks for room: the spec with its defaults, or why it would be
  // refused whatever the room. Changes nothing.
  Result<pb::JobSpec> Check(const pb::JobSpec& spec) const { return CheckAdmissible(spec, false); }
  // Admits several tenants so that the stages see them start at one moment: every spec is
  // checked first (nothing changes if one is refused), each is admitted held (kAdmitted: the
  // trainer prepares its adapter, the rollout starts nothing for it), then all are made running.
  // In lockstep the rollout starts no round while a tenant is held, so the first round has every
  // one of them. A failure after the checks (disk, memory budget) leaves the ones before it
  // running and names the one that failed.
  Status AdmitTogether(const std::vector<pb::JobSpec>& specs);
  // Stops a running tenant for its owner: the rollout produces nothing more for it and the
  // trainer starts nothing new; its checkpoints stay. kNotFound / kFailedPrecondition otherwise.
  Status StopTenant(const std::string& tenant);
  // After a restart on the same state dir (a kill -9 of serve, or of the whole machine's
  // processes): admits again every tenant that has a job.json but no final state, so each
  // resumes from its latest checkpoint (the trainer restores adapter, optimizer and data cursor).
  // One that cannot be admitted now (the service has fewer rows or a smaller memory budget than
  // before) is logged and stays on disk for a later service; one that never can be (its dataset
  // is gone) is failed on disk with the reason. Returns the ids resumed.
  Result<std::vector<std::string>> ResumeTenants();
  // Supervision: kills stalled stages (ServiceOptions::stall_timeout_ms), restarts dead ones and
  // updates tenant states.
  void Tick();
  // Ok while every stage runs or is being restarted; once a stage has crashed
  // kGiveUpAfterCrashes times in a row, kUnavailable naming it, how it last ended and its log.
  // Its tenants stay unfinished on disk: a later service on the state dir resumes them.
  const Status& failure() const { return failure_; }
  // True when every stage process now running has loaded what it needs (the base, the
  // tokenizer, its segments) and entered its loop: its engine metrics carry a start time taken
  // after it was spawned. Tenants admitted before that wait for the slowest stage's start-up.
  bool StagesReady() const;
  // Ticks until StagesReady(); kTimeout naming the stages not ready (and how often
  // each was restarted) after `timeout_ms`.
  Status WaitUntilReady(int timeout_ms);
  // True when every admitted tenant is finished, stopped or failed.
  bool AllDone() const;
  // Tenants settled so far and the wall time settling them took (their final status and state
  // files, written durably, before the table says so): for the simulator's calibration.
  uint64_t settled() const { return settled_; }
  uint64_t settle_ns() const { return settle_ns_; }
  std::vector<TenantView> Tenants() const;
  std::vector<StageView> Stages() const;
  // The pid of the stage named `name` (StageView::name: "rollout" is replica 0), or 0.
  pid_t StagePid(const std::string& name) const;
  // SIGTERM to the stages, then SIGKILL after `grace_ms`; removes the segments.
  void Stop(int grace_ms = 3000);
  const ServiceOptions& options() const { return options_; }

 private:
  struct Stage {
    std::string role;
    std::string name;                // StageView::name
    int replica = 0;                 // rollout only
    bool adapter_broadcast = false;  // the trainer, and replicas on other GPUs than its
    pid_t pid = 0;
    int restarts = 0;
    int64_t died_at = 0;
    int crashes_in_row = 0;
    int64_t spawned_mono_ns = 0;  // when the running process was forked (CLOCK_MONOTONIC)
    int64_t stalled_ms = 0;       // > 0: the running process was killed for a stall this long
    // The watchdog's view: the last metrics update serve saw, and when (serve's clock) it saw it
    // change; consecutive processes killed for a stall.
    int64_t seen_update_ns = 0;
    int64_t seen_change_ns = 0;
    int stalls_in_row = 0;
  };
  explicit Service(const ServiceOptions& o) : options_(o) {}
  Status Spawn(Stage* stage);
  // A row for a new tenant: the first free one below max_tenants, else the row of the tenant
  // that settled longest ago. kResourceExhausted when max_tenants tenants are running.
  Result<int> PickRow() const;
  // The spec with its defaults applied, if it is valid, its tenant is not admitted already, its
  // id is new to the state dir (unless `resuming` it) and a custom task's dataset loads.
  Result<pb::JobSpec> CheckAdmissible(const pb::JobSpec& spec, bool resuming) const;
  // Admit in the given state (kRunning, or kAdmitted: held); returns the row.
  Result<int> AdmitAs(const pb::JobSpec& spec, TenantState state, bool resuming);
  // The same for a spec CheckAdmissible returned: a row, the memory budget, job.json, the table.
  Result<int> AdmitChecked(const pb::JobSpec& spec, TenantState state);
  // Makes the tenant of `row` finished, stopped or failed: writes <tenant>/status.json (what
  // `status` shows once the row is reused), then <tenant>/state ("finished", "stopped: why",
  // "failed: why"), which a restarted service does not resume, then the row.
  // `reason` whole goes to the tenant's state and status.json; the table's record keeps its
  // first bytes.
  void Settle(int row, TenantRecord rec, TenantState state, const std::string& reason);
  // See settled_records_.
  void RefreshSettledStatus(int row, const TenantRecord& rec);
  // Writes the <tenant>/state files of unsaved_states_; those written leave it.
  void SaveUnsavedStates();
  TenantView ViewOf(int row, const TenantRecord& rec) const;

  ServiceOptions options_;
  std::optional<TenantTable> table_;
  std::vector<MetricsSegment> metrics_;            // one per stage, in the order of stages_
  size_t verifier_index_ = 0, trainer_index_ = 0;  // in stages_ (the rollout replicas first)
  std::vector<std::string> segments_;              // names to remove at Stop
  std::vector<Stage> stages_;
  bool stopped_ = false;
  Status failure_ = Status::Ok();
  int64_t last_tick_ns_ = 0;  // the watchdog's: a long gap means serve itself was paused
  int lock_fd_ = -1;  // <state>/service.lock, held (and inherited by the stages) while we run
  std::map<std::string, uint64_t> estimates_;  // admission estimate per admitted tenant
  // Tenants stopped or failed while the trainer may still finish a step it had begun: the row's
  // generation, the step their status.json holds and their reason. Tick rewrites status.json
  // when the trainer's count moves on (a stopped tenant's last checkpoint is that step), for as
  // long as the tenant keeps its row.
  struct SettledRecord {
    uint64_t generation = 0, step = 0;
    std::string reason;
  };
  std::map<std::string, SettledRecord> settled_records_;
  // Settled tenants whose state file could not be written yet (a full or read-only disk): its
  // folder and text, retried at every tick; reported_unsaved_: those already said on stderr.
  std::map<std::string, std::string> unsaved_states_;
  std::set<std::string> reported_unsaved_;
  uint64_t settled_ = 0, settle_ns_ = 0;
  struct Held;  // segments the service holds open (rings, adapter store)
  std::shared_ptr<Held> held_;
};

}  // namespace marlaas::serve

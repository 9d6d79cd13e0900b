#include "procs/trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "base/cpu_time.h"
#include "base/id_ranges.h"
#include "model/base_weights.h"
#include "model/compute_threads.h"
#include "model/device.h"
#include "model/device_base.h"
#include "model/lora_adapter.h"
#include "model/transformer.h"
#include "procs/common/stage_device.h"
#include "procs/common/tenant_error.h"
#include "procs/common/tenant_watcher.h"
#include "procs/trainer/adapter_fanout.h"
#include "procs/trainer/checkpoint.h"
#include "procs/trainer/step_groups.h"
#include "procs/trainer/steps_log.h"
#include "rl/multi_tenant_step.h"
#include "shm/adapter_store.h"
#include "shm/metrics.h"
#include "shm/tenant_table.h"

namespace marlaas::trainer {
namespace {

using pipeline::StageLog;
constexpr const char* kRole = "trainer";
constexpr int64_t kPartialStepAfterNs = 20'000'000'000;
// How often the tenant table is re-read: a new tenant's first adapter comes from us, so its
// rollout waits for this poll (at 10 ms, half of that on average: 3-5% of a 1-tenant run). A poll
// costs microseconds.
constexpr int64_t kTablePollNs = 2'000'000;

double WallSeconds() {
  return double(std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count()) /
         1e3;
}

// A tenant's step that runs out of memory this many times in a row is the tenant's error.
constexpr int kOutOfMemoryTries = 3;

struct TrainTenant {
  int row = -1;
  std::string id;
  uint64_t generation = 0;
  pb::JobSpec spec;
  std::string dir;
  model::LoraAdapter adapter;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  CheckpointState ck;                     // live counters (what the next checkpoint saves)
  IdRanges retired;                       // ids trained or dropped
  std::unordered_set<uint64_t> buffered;  // ids waiting in `ready`
  std::deque<pb::TrajectoryGroup> ready;  // scored groups waiting for a step
  uint64_t retired_total = 0;             // groups_trained + groups_dropped
  uint64_t checkpointed_retired = 0;      // retired_total at the last checkpoint
  bool finished = false;                  // reached max_steps (final checkpoint written)
  int64_t last_arrival_ns = 0;            // when the latest group was buffered
  int64_t checkpoint_failed_ns = 0;       // when the last save failed (0: it did not)
  int out_of_memory_in_row = 0;  // its steps that ran out of memory since its last good one
  TenantMetrics metrics{};
};

// Whether the tenant's last save failed less than a second ago (retried once a second).
bool RecentlyFailedToSave(const TrainTenant& t) {
  return t.checkpoint_failed_ns != 0 && MonotonicNanos() - t.checkpoint_failed_ns < 1'000'000'000;
}

// One fetched scored-ring record, in ring order, until it can be acknowledged.
struct Pending {
  RecordView view;
  TrainTenant* tenant = nullptr;  // null: nothing to wait for (corrupt, unknown tenant)
  uint64_t retire_index = 0;      // 0: not retired yet; else ackable once checkpointed past it
};

class Trainer {
 public:
  Trainer(const pipeline::StageArgs& args, std::shared_ptr<const model::BaseWeights> base,
          TenantTable table, AdapterStore store, MetricsSegment metrics,
          std::vector<MetricsSegment> rollout_metrics, RingConsumer input)
      : args_(args),
        base_(std::move(base)),
        model_(base_),
        table_(std::move(table)),
        store_(std::move(store)),
        metrics_(std::move(metrics)),
        rollout_metrics_(std::move(rollout_metrics)),
        input_(std::move(input)),
        watcher_(&table_, args.state_dir, kRole) {}

  Status Run();
  // Before the stage reports ready: one GRPO step of a throwaway adapter on a small batch of
  // made-up rows (full LoRA targets), so the first tenant's first step does not pay LibTorch's
  // and the BLAS's one-time costs (on the 2-core machine a fresh trainer's first step cost 21.8
  // ms of CPU against 8.9 ms later). Touches no tenant, segment or metric.
  Status WarmUp();
  void SetFanout(std::unique_ptr<AdapterFanout> fanout) { fanout_ = std::move(fanout); }

 private:
  // Follows the tenant table: starts new tenants, forgets settled or replaced ones.
  void SyncTenants();
  // Stops training `t` for good: checkpoints what it trained since the last checkpoint and lets
  // its pending records be acknowledged. The caller then drops it.
  void Forget(TrainTenant* t);
  Status StartTenant(const pipeline::WatchedTenant& w);
  void HandleRecord(const RecordView& view);
  void Retire(TrainTenant* t, uint64_t group_id, const std::string& drop_reason);
  // Whether it stepped: then more may be ready, and the loop does not wait for records.
  bool TrainReady(bool under_pressure);
  // `result` is null when every group of the step was degenerate (no update).
  void FinishStep(TrainTenant* t, const std::vector<pb::TrajectoryGroup>& groups,
                  const rl::TenantStepResult* result, int degenerate);
  Status Publish(TrainTenant* t);
  void Checkpoint(TrainTenant* t);
  // Checkpoints each finished tenant that dropped late groups since its last checkpoint: their
  // records are acknowledged once that is durable, one save for all a fetch brought (after a
  // failed save, at most once a second).
  void SaveLateDrops();
  // Progress for serve's stall watchdog (ServiceOptions::stall_timeout_ms) in the middle of a
  // long pass of the loop: the engine metrics' update time.
  void Heartbeat();
  void AckDone();
  void StoreMetrics();
  TrainTenant* Lookup(const std::string& id, uint64_t generation);

  pipeline::StageArgs args_;
  std::shared_ptr<const model::BaseWeights> base_;
  model::Transformer model_;
  TenantTable table_;
  AdapterStore store_;
  MetricsSegment metrics_;
  // Read only, one per rollout replica: each tenant's prompt cursor, at the replica serving it.
  std::vector<MetricsSegment> rollout_metrics_;
  RingConsumer input_;
  pipeline::TenantWatcher watcher_;
  std::map<int, std::unique_ptr<TrainTenant>> tenants_;  // by table row
  std::deque<Pending> pending_;
  std::unordered_map<uint64_t, Pending*> pending_by_group_;  // buffered groups' records
  EngineMetrics engine_{};
  int64_t checkpoint_cpu_ns_ = 0;  // CPU time of the checkpoints written (kept out of step costs)
  int64_t last_step_end_ns_ = 0;   // monotonic: a step after a longer idle gap is cold (CostSums)
  // --adapter-broadcast: every published adapter also goes to the replicas on other GPUs.
  std::unique_ptr<AdapterFanout> fanout_;
};

TrainTenant* Trainer::Lookup(const std::string& id, uint64_t generation) {
  for (auto& [row, t] : tenants_)
    if (t->id == id && t->generation == generation) return t.get();
  return nullptr;
}

Status Trainer::StartTenant(const pipeline::WatchedTenant& w) {
  auto t = std::make_unique<TrainTenant>();
  t->row = w.row;
  t->id = w.record.id;
  t->generation = w.record.generation;
  t->spec = w.spec;
  t->dir = pipeline::TenantDir(args_.state_dir, t->id);
  const pb::OptimizerSpec& o = t->spec.optimizer();
  auto make_optimizer = [&](model::LoraAdapter* a) {
    a->MoveTo(model_.device());  // trained where the model runs; the optimizer state follows
    a->flat().set_requires_grad(true);
    t->optimizer = std::make_unique<torch::optim::AdamW>(
        std::vector<torch::Tensor>{a->flat()}, torch::optim::AdamWOptions(o.learning_rate())
                                                   .betas({o.beta1(), o.beta2()})
                                                   .weight_decay(o.weight_decay()));
    return t->optimizer.get();
  };
  auto loaded = LoadLatestCheckpoint(t->dir, *base_, make_optimizer);
  if (loaded.ok()) {
    for (const std::string& s : loaded->skipped)
      StageLog(kRole, "tenant %s: skipped a bad checkpoint: %s", t->id.c_str(), s.c_str());
    t->adapter = std::move(loaded->adapter);
    t->ck = loaded->state;
    if (loaded->lost_retired > 0) {
      // Groups the bad checkpoints had retired were acknowledged on the ring: they are gone.
      // Counted as dropped, so that the rollout (which paces on trained + dropped) and the
      // tenant's totals stay whole.
      t->ck.groups_dropped += loaded->lost_retired;
      pipeline::AppendLine(t->dir + "/trainer.log",
                           "lost " + std::to_string(loaded->lost_retired) +
                               " trained groups with a bad checkpoint; resumed from " +
                               loaded->dir);
    }
    StageLog(kRole, "tenant %s: resumed from %s (step %llu, version %llu)", t->id.c_str(),
             loaded->dir.c_str(), (unsigned long long)t->ck.steps,
             (unsigned long long)t->ck.version);
  } else if (loaded.status().code() == StatusCode::kNotFound) {
    MARLAAS_ASSIGN_OR_RETURN(uint32_t mask, pipeline::TargetMaskOf(t->spec));
    MARLAAS_ASSIGN_OR_RETURN(t->adapter, model::LoraAdapter::Create(
                                             *base_, t->spec.lora().rank(), t->spec.lora().alpha(),
                                             mask, t->spec.dataset().seed() * 7919 + 17));
    make_optimizer(&t->adapter);
    t->ck.version = 1;
  } else {
    return loaded.status();
  }
  // Steps logged after the checkpoint it resumed from are trained again: their lines move out.
  auto trimmed = TrimStepsLog(t->dir, t->ck.steps);
  if (!trimmed.ok()) {
    StageLog(kRole, "tenant %s: steps.jsonl: %s", t->id.c_str(),
             trimmed.status().ToString().c_str());
  } else if (trimmed->moved > 0) {
    pipeline::AppendLine(t->dir + "/trainer.log",
                         std::to_string(trimmed->moved) + " lines of steps.jsonl after step " +
                             std::to_string(t->ck.steps) +
                             " (lost with the trainer that logged them; trained again) moved to "
                             "steps.lost.jsonl");
  }
  t->retired = t->ck.retired_groups;
  t->retired_total = t->ck.groups_trained + t->ck.groups_dropped;
  t->checkpointed_retired = t->retired_total;
  t->finished = t->ck.steps >= t->spec.max_steps();
  t->last_arrival_ns = MonotonicNanos();  // not "idle" before its first group came

  // Our slot is the tenant's table row. Register it unless it already holds this tenant.
  auto info = store_.Info(t->row);
  MARLAAS_RETURN_IF_ERROR(info.status());
  if (!info->active || t->id != info->tenant_id) {
    if (info->active) MARLAAS_RETURN_IF_ERROR(store_.Release(t->row));
    MARLAAS_RETURN_IF_ERROR(store_.Register(t->row, t->id, t->adapter.layout()));
  }
  MARLAAS_ASSIGN_OR_RETURN(uint64_t published, store_.PublishedVersion(t->row));
  if (published < t->ck.version) {
    MARLAAS_RETURN_IF_ERROR(Publish(t.get()));
  } else if (published > t->ck.version) {
    // Steps after our last checkpoint were published and lost with the process: their groups
    // come again from the ring. Republish the checkpoint under a number far enough past the lost
    // ones that every group sampled before (by a lost version, whose weights are gone, or by an
    // older one) counts as stale and is dropped, as DESIGN says; `published + 1` let a group of
    // the last lost version through as 1 step stale.
    t->ck.version = published + t->spec.max_staleness() + 1;
    MARLAAS_RETURN_IF_ERROR(Publish(t.get()));
  }
  auto old = metrics_.LoadTenant(t->row);
  t->metrics = TenantMetrics{};
  if (old.ok() && old->generation == t->generation) t->metrics = *old;
  t->metrics.generation = t->generation;
  t->metrics.steps = t->ck.steps;
  t->metrics.checkpointed_steps = t->ck.steps;  // loaded from one, or none yet (0)
  t->metrics.groups = t->ck.groups_trained;
  t->metrics.groups_dropped = t->ck.groups_dropped;
  t->metrics.adapter_version = t->ck.version;
  t->metrics.last_reward_mean = t->ck.last_reward_mean;
  tenants_[t->row] = std::move(t);
  return Status::Ok();
}

void Trainer::Forget(TrainTenant* t) {
  // Steps since the last checkpoint are kept (export gives the newest checkpoint); groups still
  // waiting for a step are not trained.
  if (t->retired_total > t->checkpointed_retired) Checkpoint(t);
  for (Pending& p : pending_) {
    if (p.tenant != t) continue;
    p.tenant = nullptr;  // nothing to wait for: acknowledged in ring order
  }
  for (const pb::TrajectoryGroup& g : t->ready) pending_by_group_.erase(g.group_id());
  // A CUDA IPC store's device buffers go back once the rollout lets go (host store: no-op).
  if (Status st = store_.FreeBuffers(t->row); !st.ok())
    StageLog(kRole, "tenant %s: freeing its adapter buffers: %s", t->id.c_str(),
             st.ToString().c_str());
  StageLog(kRole, "tenant %s: no longer trained (%zu waiting groups left untrained)", t->id.c_str(),
           t->ready.size());
}

void Trainer::SyncTenants() {
  const auto& watched = watcher_.Poll();
  // Settled tenants, and tenants whose rows went to new ones, first: a reused row's new tenant
  // takes the old one's place in tenants_, and the records still pending point at the old one.
  for (auto it = tenants_.begin(); it != tenants_.end();) {
    const pipeline::WatchedTenant* w = watcher_.Find(it->second->id, it->second->generation);
    if (w != nullptr && !IsSettled(w->record.state)) {
      ++it;
      continue;
    }
    Forget(it->second.get());
    it = tenants_.erase(it);
  }
  for (const pipeline::WatchedTenant& w : watched) {
    auto it = tenants_.find(w.row);
    if (it != tenants_.end() && it->second->generation == w.record.generation) continue;
    if (w.record.state != TenantState::kRunning && w.record.state != TenantState::kAdmitted)
      continue;
    Status st = StartTenant(w);
    Heartbeat();  // a resume of many tenants (their checkpoints loaded) is one long pass
    if (!st.ok()) {
      StageLog(kRole, "tenant %s: cannot start training: %s", w.record.id, st.ToString().c_str());
      TenantMetrics m{};
      m.generation = w.record.generation;
      pipeline::SetTenantError(pipeline::TenantDir(args_.state_dir, w.record.id), kRole,
                               "trainer: " + st.ToString(), &m);
      (void)metrics_.StoreTenant(w.row, m);
    }
  }
}

Status Trainer::Publish(TrainTenant* t) {
  MARLAAS_ASSIGN_OR_RETURN(AdapterWriteSpan span, store_.BeginWrite(t->row));
  const auto flat = t->adapter.flat().detach().contiguous();
  const size_t bytes = size_t(flat.numel()) * sizeof(float);
  if (bytes > span.bytes) return Status(StatusCode::kResourceExhausted, "adapter too large");
  // The span is device memory for a CUDA IPC store (written on the legacy default stream, the
  // one the backend records its event after) and host memory otherwise.
  const bool span_on_device = store_.backend() == AdapterBackend::kCudaIpc;
  auto dst =
      torch::from_blob(span.data, {flat.numel()},
                       torch::TensorOptions(torch::kFloat32)
                           .device(span_on_device ? flat.device() : torch::Device(torch::kCPU)));
  dst.copy_(flat);
  MARLAAS_RETURN_IF_ERROR(store_.Publish(t->row, t->ck.version));
  if (fanout_ != nullptr && flat.is_cuda()) {
    auto info = store_.Info(t->row);
    if (info.ok()) fanout_->Published(t->row, info->generation, t->ck.version, flat);
  }
  return Status::Ok();
}

void Trainer::Checkpoint(TrainTenant* t) {
  const int64_t t0 = MonotonicNanos(), cpu0 = ProcessCpuNanos();
  t->ck.retired_groups = t->retired;
  Status st = SaveCheckpoint(t->dir, t->adapter, *t->optimizer, t->ck);
  ++engine_.checkpoints;
  engine_.checkpoint_ns += uint64_t(MonotonicNanos() - t0);
  checkpoint_cpu_ns_ += ProcessCpuNanos() - cpu0;
  if (!st.ok()) {
    StageLog(kRole, "tenant %s: checkpoint failed: %s", t->id.c_str(), st.ToString().c_str());
    pipeline::SetTenantError(t->dir, kRole, "checkpoint: " + st.message(), &t->metrics);
    t->checkpoint_failed_ns = MonotonicNanos();
    return;
  }
  // Saved again: the problem a failed save reported is over (it stayed in `status`).
  if (t->checkpoint_failed_ns != 0 &&
      std::string(t->metrics.last_error).rfind("checkpoint: ", 0) == 0) {
    pipeline::ClearTenantError(t->dir, kRole, &t->metrics);
  }
  t->checkpoint_failed_ns = 0;
  t->checkpointed_retired = t->retired_total;
  t->metrics.checkpointed_steps = t->ck.steps;
  Heartbeat();  // many tenants' checkpoints can make one pass long
}

void Trainer::Retire(TrainTenant* t, uint64_t group_id, const std::string& drop_reason) {
  t->buffered.erase(group_id);
  t->retired.Insert(group_id);
  ++t->retired_total;
  if (drop_reason.empty()) {
    ++t->ck.groups_trained;
  } else {
    ++t->ck.groups_dropped;
    pipeline::AppendLine(t->dir + "/trainer.log",
                         "dropped group " + std::to_string(group_id) + ": " + drop_reason);
  }
  auto it = pending_by_group_.find(group_id);
  if (it != pending_by_group_.end()) {
    it->second->retire_index = t->retired_total;
    pending_by_group_.erase(it);
  }
}

void Trainer::HandleRecord(const RecordView& view) {
  pending_.push_back(Pending{view, nullptr, 0});
  Pending* p = &pending_.back();
  pb::TrajectoryGroup g;
  Status st =
      view.type == pipeline::kGroupRecord
          ? pipeline::ParseRecord(view, &g, pipeline::kScoredRing)
          : Status(StatusCode::kCorrupt, "unexpected record type " + std::to_string(view.type) +
                                             " on " + pipeline::kScoredRing);
  if (!st.ok()) {
    StageLog(kRole, "quarantined: %s", st.ToString().c_str());
    ++engine_.errors;
    return;
  }
  TrainTenant* t = Lookup(g.tenant(), g.tenant_generation());
  if (t == nullptr) {
    SyncTenants();  // admitted a moment ago?
    t = Lookup(g.tenant(), g.tenant_generation());
  }
  if (t == nullptr) {
    StageLog(kRole, "dropped group %llu of unknown tenant %s/%llu",
             (unsigned long long)g.group_id(), g.tenant().c_str(),
             (unsigned long long)g.tenant_generation());
    return;
  }
  p->tenant = t;
  if (t->retired.Contains(g.group_id()) || t->buffered.count(g.group_id())) {
    // A replayed duplicate: wait for the checkpoint that covers the original.
    p->retire_index = t->retired_total == 0 ? 1 : t->retired_total;
    if (t->finished) p->retire_index = t->checkpointed_retired;
    return;
  }
  pending_by_group_[g.group_id()] = p;
  if (t->finished) {
    // Checkpointed with the other records of this fetch (SaveLateDrops): one save for a burst.
    Retire(t, g.group_id(), "tenant finished training");
  } else if (!g.failure().empty()) {
    Retire(t, g.group_id(), g.failure());
  } else {
    t->buffered.insert(g.group_id());
    t->ready.push_back(std::move(g));
    t->last_arrival_ns = MonotonicNanos();
  }
}

bool Trainer::TrainReady(bool under_pressure) {
  // Under ring pressure, the tenant whose record blocks the ack cursor steps with what it has.
  TrainTenant* forced = nullptr;
  if (under_pressure) {
    for (const Pending& p : pending_) {
      if (p.tenant != nullptr && p.retire_index == 0) {
        forced = p.tenant;
        break;
      }
      if (p.tenant != nullptr && p.retire_index > p.tenant->checkpointed_retired) {
        // After a failed save, once a second (it was tried on every pass: thousands of times).
        if (!RecentlyFailedToSave(*p.tenant)) Checkpoint(p.tenant);
        break;
      }
    }
  }
  std::vector<TrainTenant*> stepping;
  std::vector<std::vector<pb::TrajectoryGroup>> batches;
  std::vector<rl::TenantStep> steps;
  std::vector<size_t> step_of;  // index into steps per stepping tenant, or npos
  std::map<TrainTenant*, int> degenerate_in_step;
  if (args_.lockstep && forced == nullptr) {
    // Not while a tenant's groups are still on their way (started by the rollout: its prompt
    // cursor; not yet here) and its batch is short, so the tenants of a round step together;
    // the rollout starts the next round after. A tenant with nothing on its way (not in this
    // round) does not hold the others back, and the partial-step timeout bounds the wait.
    for (auto& [row, tp] : tenants_) {
      const TrainTenant* t = tp.get();
      const bool idle = MonotonicNanos() - t->last_arrival_ns > kPartialStepAfterNs;
      if (t->finished || idle || t->ready.size() >= t->spec.prompts_per_step()) continue;
      auto rm = rollout_metrics_[size_t(pipeline::ReplicaOfRow(t->row, args_.rollout_replicas))]
                    .LoadTenant(t->row);
      const uint64_t started = rm.ok() && rm->generation == t->generation ? rm->cursor : 0;
      if (started > t->retired_total + t->ready.size()) return false;
    }
  }
  for (auto& [row, tp] : tenants_) {
    TrainTenant* t = tp.get();
    const size_t need = t->spec.prompts_per_step();
    // A partial batch is trained when the ring is under pressure, or when no group has come for
    // kPartialStepAfterNs (the rest of the batch was lost upstream: do not wait for ever).
    const bool idle = MonotonicNanos() - t->last_arrival_ns > kPartialStepAfterNs;
    if (t->finished || t->ready.empty() || (t->ready.size() < need && t != forced && !idle))
      continue;
    std::vector<pb::TrajectoryGroup> batch;
    int degenerate = 0;
    rl::TenantStep step;
    step.adapter = &t->adapter;
    step.optimizer = t->optimizer.get();
    step.grpo.clip_eps_low = t->spec.grpo().clip_eps_low();
    step.grpo.clip_eps_high = t->spec.grpo().clip_eps_high();
    step.grpo.kl_beta = t->spec.grpo().kl_beta();
    step.temperature = t->spec.sampling().temperature();
    step.grad_clip = t->spec.optimizer().grad_clip();
    while (!t->ready.empty() && batch.size() < need) {
      pb::TrajectoryGroup g = std::move(t->ready.front());
      t->ready.pop_front();
      const uint64_t staleness =
          t->ck.version > g.behaviour_version() ? t->ck.version - g.behaviour_version() : 0;
      if (staleness > t->spec.max_staleness()) {
        Retire(t, g.group_id(),
               "stale: sampled by version " + std::to_string(g.behaviour_version()) +
                   ", trainer at " + std::to_string(t->ck.version));
        continue;
      }
      if (g.behaviour_version() > t->ck.version) {
        // Versions only grow (a restarted trainer republishes past what it lost), so this was
        // not sampled by this tenant's adapter: its logprobs would make the update wrong.
        Retire(t, g.group_id(),
               "sampled by version " + std::to_string(g.behaviour_version()) +
                   ", newer than the tenant's " + std::to_string(t->ck.version));
        continue;
      }
      ++t->metrics.staleness[std::min<uint64_t>(staleness, kStalenessBuckets - 1)];
      t->ck.data_cursor = std::max<uint64_t>(t->ck.data_cursor, g.prompt_id() + 1);
      if (AddGroupToStep(g, t->spec.grpo().normalize_std(), &step)) ++degenerate;
      batch.push_back(std::move(g));
    }
    if (batch.empty()) continue;
    t->ck.groups_degenerate += uint64_t(degenerate);
    degenerate_in_step[t] = degenerate;
    stepping.push_back(t);
    batches.push_back(std::move(batch));
    step_of.push_back(step.completions.empty() ? SIZE_MAX : steps.size());
    if (!step.completions.empty()) steps.push_back(std::move(step));
  }
  if (stepping.empty()) return false;
  const int64_t t0 = MonotonicNanos(), cpu0 = ProcessCpuNanos();
  const int64_t checkpoint_cpu_before = checkpoint_cpu_ns_;
  // The learning-rate schedule of each tenant for this step.
  for (size_t k = 0; k < stepping.size(); ++k) {
    TrainTenant* t = stepping[k];
    const pb::OptimizerSpec& o = t->spec.optimizer();
    const double s = double(t->ck.steps), total = double(t->spec.max_steps());
    double lr = o.learning_rate();
    if (o.warmup_steps() > 0 && s < o.warmup_steps()) lr *= (s + 1) / o.warmup_steps();
    const double progress = std::min(1.0, s / std::max(1.0, total));
    if (o.schedule() == "linear") lr *= 1.0 - progress;
    if (o.schedule() == "cosine") lr *= 0.5 * (1 + std::cos(M_PI * progress));
    for (auto& group : t->optimizer->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  // A tenant whose step fails (out of memory on a batch this large; a gradient that is not
  // finite) has its groups dropped with the reason: retried after a restart, the same batch
  // would fail the same way. The others in the step go on (rl::MultiTenantStepIsolated).
  rl::IsolatedSteps done;
  if (!steps.empty()) {
    done =
        rl::MultiTenantStepIsolated(model_, steps, /*share_prompts=*/true, [this] { Heartbeat(); });
  }
  const std::vector<rl::TenantStepResult>& results = done.results;
  for (size_t k = 0; k < stepping.size(); ++k) {
    const size_t i = step_of[k];
    if (i != SIZE_MAX && !done.failed[i].empty()) {
      const std::string& why = done.failed[i];
      StageLog(kRole, "tenant %s: %s", stepping[k]->id.c_str(), why.substr(0, 300).c_str());
      ++engine_.errors;
      for (const pb::TrajectoryGroup& g : batches[k])
        Retire(stepping[k], g.group_id(), why.substr(0, 200));
      // A gradient that was not finite once is the step's problem, not the tenant's: serve
      // fails a tenant whose first step has a last_error. So is memory running out, which may
      // pass (other tenants' steps, a passing peak): the tenant goes on with its next groups,
      // and only the third time in a row is it the tenant's error (a step that fit with room to
      // spare failed the tenant for good when the memory was short once).
      if (!done.out_of_memory[i]) stepping[k]->out_of_memory_in_row = 0;  // not in a row
      const bool passing =
          results[i].not_finite ||
          (done.out_of_memory[i] && ++stepping[k]->out_of_memory_in_row < kOutOfMemoryTries);
      if (!passing) {
        pipeline::SetTenantError(stepping[k]->dir, kRole, why, &stepping[k]->metrics);
      } else if (done.out_of_memory[i]) {
        StageLog(kRole,
                 "tenant %s: out of memory %d time(s) in a row; going on with its next "
                 "groups",
                 stepping[k]->id.c_str(), stepping[k]->out_of_memory_in_row);
      }
      continue;
    }
    FinishStep(stepping[k], batches[k], i == SIZE_MAX ? nullptr : &results[i],
               degenerate_in_step[stepping[k]]);
  }
  const int64_t spent = MonotonicNanos() - t0;
  engine_.busy_ns += uint64_t(spent);
  size_t rows = 0, padded = 0;
  for (size_t k = 0; k < stepping.size(); ++k) {
    if (step_of[k] == SIZE_MAX) continue;
    const rl::TenantStep& st = steps[step_of[k]];
    size_t tenant_tokens = 0;
    for (const rl::Completion& c : st.completions) tenant_tokens += c.tokens.size();
    stepping[k]->metrics.samples += st.completions.size();  // trained rows
    stepping[k]->metrics.tokens += tenant_tokens;
    // Positions computed for it, padded to its own longest (shared prompts counted once).
    stepping[k]->metrics.padded_tokens += size_t(results[step_of[k]].own_padded_tokens);
    stepping[k]->metrics.prefix_rows += size_t(results[step_of[k]].own_prefix_rows);
    stepping[k]->metrics.prefix_tokens += size_t(results[step_of[k]].own_prefix_tokens);
    rows += st.completions.size();
    padded += size_t(results[step_of[k]].padded_tokens);
  }
  // The cost fit gets padded positions, not real tokens (what a step computes: a tenant batched
  // with longer ones costs more per real token than alone), and the step's CPU time (the
  // simulator shares the cores itself) without its checkpoints, which are timed on their own.
  const int64_t cpu = ProcessCpuNanos() - cpu0;
  const int64_t checkpointing = checkpoint_cpu_ns_ - checkpoint_cpu_before;
  // Only a step that computes pays for cold caches: one whose groups were all degenerate (0.1 ms,
  // and weighted 1/s^2 in the fit) would pin the term to zero.
  const bool cold = !steps.empty() && t0 - last_step_end_ns_ > CostSums::kColdAfterNs;
  last_step_end_ns_ = MonotonicNanos();
  engine_.cost.Add(double(rows), double(padded), double(steps.size()), cold ? 1.0 : 0.0,
                   double(std::max<int64_t>(0, cpu - checkpointing)) * 1e-9);
  return true;
}

void Trainer::FinishStep(TrainTenant* t, const std::vector<pb::TrajectoryGroup>& groups,
                         const rl::TenantStepResult* result, int degenerate) {
  uint64_t behaviour_min = UINT64_MAX, behaviour_max = 0;
  for (const pb::TrajectoryGroup& g : groups) {
    behaviour_min = std::min<uint64_t>(behaviour_min, g.behaviour_version());
    behaviour_max = std::max<uint64_t>(behaviour_max, g.behaviour_version());
  }
  const uint64_t trained_at = t->ck.version;
  t->out_of_memory_in_row = 0;
  // A step went through: an earlier step's error is over (a failed save's stays until a save
  // succeeds, Checkpoint).
  if (t->metrics.last_error[0] != '\0' &&
      std::string(t->metrics.last_error).rfind("checkpoint: ", 0) != 0) {
    pipeline::ClearTenantError(t->dir, kRole, &t->metrics);
  }
  ++t->ck.steps;
  ++engine_.items;  // the trainer counts tenant steps
  ++t->ck.version;
  Status st = Publish(t);
  if (!st.ok()) {
    StageLog(kRole, "tenant %s: publish failed: %s", t->id.c_str(), st.ToString().c_str());
    ++engine_.errors;
  }
  double sum = 0, sq = 0;
  size_t n = 0;
  std::vector<uint64_t> ids;
  for (const pb::TrajectoryGroup& g : groups) {
    ids.push_back(g.group_id());
    for (const pb::Trajectory& tr : g.trajectories()) {
      sum += tr.reward();
      sq += double(tr.reward()) * tr.reward();
      ++n;
    }
    Retire(t, g.group_id(), "");
  }
  t->ck.last_reward_mean = n ? sum / double(n) : 0;
  t->metrics.reward_count += n;
  t->metrics.reward_sum += sum;
  t->metrics.reward_sq_sum += sq;
  nlohmann::json line{{"step", t->ck.steps},
                      {"version", t->ck.version},
                      {"reward_mean", t->ck.last_reward_mean},
                      {"groups", ids},
                      {"loss", result ? result->loss : 0.0},
                      {"clip_fraction", result ? result->clip_fraction : 0.0},
                      {"grad_norm", result ? result->grad_norm : 0.0},
                      {"updated", result != nullptr},
                      {"degenerate_groups", degenerate},
                      {"staleness", trained_at - std::min(trained_at, behaviour_min)},
                      {"trained_at", trained_at},
                      {"behaviour_versions", {behaviour_min, behaviour_max}},
                      {"time", WallSeconds()}};
  // With a KL term: its mean per trained token (how far the tenant's policy is from the base).
  if (t->spec.grpo().kl_beta() > 0) line["mean_kl"] = result ? result->mean_kl : 0.0;
  pipeline::AppendLine(t->dir + "/steps.jsonl", line.dump());
  if (t->ck.steps >= t->spec.max_steps()) {
    t->finished = true;
    while (!t->ready.empty()) {
      Retire(t, t->ready.front().group_id(), "tenant finished training");
      t->ready.pop_front();
    }
    Checkpoint(t);
    StageLog(kRole, "tenant %s: finished %llu steps", t->id.c_str(),
             (unsigned long long)t->ck.steps);
  } else if (t->ck.steps % t->spec.checkpoint_every() == 0) {
    Checkpoint(t);
  }
}

void Trainer::Heartbeat() {
  engine_.updated_mono_ns = MonotonicNanos();
  metrics_.StoreEngine(engine_);
}

void Trainer::SaveLateDrops() {
  for (auto& [row, t] : tenants_) {
    if (!t->finished || t->retired_total == t->checkpointed_retired) continue;
    // After a failed save (a full disk), try again once a second, not on every pass of the loop.
    if (RecentlyFailedToSave(*t)) continue;
    Checkpoint(t.get());
  }
}

void Trainer::AckDone() {
  const RecordView* last = nullptr;
  RecordView last_copy;
  while (!pending_.empty()) {
    const Pending& p = pending_.front();
    const bool done = p.tenant == nullptr ||
                      (p.retire_index != 0 && p.retire_index <= p.tenant->checkpointed_retired);
    if (!done) break;
    last_copy = p.view;
    last = &last_copy;
    pending_.pop_front();
  }
  if (last != nullptr) input_.Ack(*last);
}

void Trainer::StoreMetrics() {
  uint64_t queued = 0;
  for (auto& [row, t] : tenants_) {
    t->metrics.steps = t->ck.steps;
    t->metrics.adapter_version = t->ck.version;
    t->metrics.groups = t->ck.groups_trained;
    t->metrics.groups_dropped = t->ck.groups_dropped;
    t->metrics.last_reward_mean = t->ck.last_reward_mean;
    t->metrics.groups_degenerate = t->ck.groups_degenerate;
    t->metrics.cursor = t->ck.data_cursor;
    queued += t->ready.size();
    (void)metrics_.StoreTenant(row, t->metrics);
  }
  engine_.updated_mono_ns = MonotonicNanos();
  engine_.queue_depth = queued;
  metrics_.StoreEngine(engine_);
}

Status Trainer::Run() {
  auto prev = metrics_.LoadEngine();
  engine_ = EngineMetrics{};
  engine_.started_mono_ns = MonotonicNanos();
  if (prev.ok() && prev->started_mono_ns != 0) engine_.restarts = prev->restarts + 1;
  if (prev.ok()) {  // the cost sums span restarts (shm/metrics.h)
    engine_.cost = prev->cost;
    engine_.checkpoints = prev->checkpoints;
    engine_.checkpoint_ns = prev->checkpoint_ns;
  }
  metrics_.StoreEngine(engine_);  // ready: serve's WaitUntilReady sees the start time
  int64_t next_poll = 0;
  bool stepped = false;
  while (!pipeline::StopRequested()) {
    if (MonotonicNanos() >= next_poll) {
      SyncTenants();
      // A new tenant waits for this poll (its first adapter comes from us): keep it short. A
      // poll re-reads the table's rows and reuses the job specs read before, some microseconds.
      next_poll = MonotonicNanos() + kTablePollNs;
    }
    // Wait for records only when the last pass trained nothing: after a step another batch may
    // be ready already (a tenant two steps ahead, or one that waited for this step), and waiting
    // here first delayed it by up to the whole poll interval.
    const Deadline first_wait =
        stepped ? Deadline::Now() : Deadline::AfterMs(kTablePollNs / 1'000'000);
    bool got = false;
    for (int i = 0; i < 256; ++i) {
      auto rec = input_.Fetch(i == 0 ? first_wait : Deadline::Now());
      if (rec.ok()) {
        HandleRecord(*rec);
        got = true;
        continue;
      }
      if (rec.status().code() == StatusCode::kCorrupt) {
        std::string raw;
        auto skipped = input_.Quarantine(&raw);
        StageLog(kRole, "quarantined a corrupt record (%s), %zu bytes skipped",
                 rec.status().message().c_str(), skipped.ok() ? size_t(*skipped) : size_t(0));
        ++engine_.errors;
        continue;
      }
      break;  // timeout, or the verifier is gone for now (serve restarts it)
    }
    (void)got;
    SaveLateDrops();
    const bool pressure =
        input_.unacked_bytes() > pipeline::PipelineRingOptions().capacity_bytes / 2;
    stepped = TrainReady(pressure);
    AckDone();
    StoreMetrics();
  }
  for (auto& [row, t] : tenants_)
    if (t->retired_total > t->checkpointed_retired) Checkpoint(t.get());
  AckDone();
  StoreMetrics();
  return Status::Ok();
}

}  // namespace

Status Trainer::WarmUp() {
  MARLAAS_ASSIGN_OR_RETURN(model::LoraAdapter adapter,
                           model::LoraAdapter::Create(*base_, 8, 16, (1u << kNumLoraTargets) - 1,
                                                      /*seed=*/1));
  adapter.MoveTo(model_.device());
  adapter.flat().set_requires_grad(true);
  torch::optim::AdamW optimizer(std::vector<torch::Tensor>{adapter.flat()},
                                torch::optim::AdamWOptions(1e-4));
  rl::TenantStep step;
  step.adapter = &adapter;
  step.optimizer = &optimizer;
  const int32_t vocab = int32_t(base_->config.vocab_size);
  for (int row = 0; row < 4; ++row) {
    // One group: a shared 12-token prompt (the step computes it once), then each row's own.
    rl::Completion c;
    for (int32_t i = 0; i < 24; ++i) c.tokens.push_back(((i < 12 ? 0 : row * 31) + i * 7) % vocab);
    c.behaviour_logprobs.assign(c.tokens.size(), -1.0f);
    c.loss_mask.assign(c.tokens.size(), 0);
    for (size_t i = 12; i < c.tokens.size(); ++i) c.loss_mask[i] = 1;
    c.advantage = row % 2 == 0 ? 1.0f : -1.0f;
    step.completions.push_back(std::move(c));
  }
  std::vector<rl::TenantStep> steps;
  steps.push_back(std::move(step));
  rl::MultiTenantStep(model_, steps);
  return Status::Ok();
}

Status RunTrainer(const pipeline::StageArgs& args) {
  model::SetComputeThreads(args.threads);
  MARLAAS_ASSIGN_OR_RETURN(torch::Device device, model::ParseDevice(args.device));
  MARLAAS_ASSIGN_OR_RETURN(auto base, model::LoadBase(args.instance, args.model_dir, device,
                                                      Deadline::AfterMs(300'000)));
  MARLAAS_ASSIGN_OR_RETURN(TenantTable table, TenantTable::Attach(args.instance));
  MARLAAS_ASSIGN_OR_RETURN(AdapterStore store, pipeline::AttachStageAdapterStore(args.instance));
  MARLAAS_ASSIGN_OR_RETURN(MetricsSegment metrics,
                           MetricsSegment::Attach(args.instance, pipeline::kTrainerRole));
  MARLAAS_ASSIGN_OR_RETURN(RingConsumer input,
                           RingConsumer::Attach({args.instance, pipeline::kScoredRing}));
  std::vector<MetricsSegment> rollout_metrics;
  for (int r = 0; r < args.rollout_replicas; ++r) {
    MARLAAS_ASSIGN_OR_RETURN(MetricsSegment m,
                             MetricsSegment::Attach(args.instance, pipeline::RolloutName(r)));
    rollout_metrics.push_back(std::move(m));
  }
  Trainer stage(args, std::move(base), std::move(table), std::move(store), std::move(metrics),
                std::move(rollout_metrics), std::move(input));
  if (args.adapter_broadcast) {
    // Without it the replicas on other GPUs still read every adapter from the store.
    auto fanout = AdapterFanout::Start(args.instance);
    if (fanout.ok()) {
      stage.SetFanout(std::move(*fanout));
    } else {
      StageLog(kRole, "no adapter broadcast: %s", fanout.status().ToString().c_str());
    }
  }
  const int64_t warm0 = MonotonicNanos();
  MARLAAS_RETURN_IF_ERROR(stage.WarmUp());
  StageLog(kRole, "ready (model %s on %s; warmed up in %.0f ms)", args.model_dir.c_str(),
           model::DeviceName(device).c_str(), double(MonotonicNanos() - warm0) / 1e6);
  return stage.Run();
}

}  // namespace marlaas::trainer

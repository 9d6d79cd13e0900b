#include "procs/verifier/verifier.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "base/cpu_time.h"
#include "procs/common/task_source.h"
#include "procs/common/tenant_error.h"
#include "procs/common/tenant_watcher.h"
#include "procs/verifier/worker_pool.h"
#include "sandbox/probe.h"
#include "sandbox/sandbox_pool.h"
#include "sandbox/tool_syntax.h"
#include "shm/metrics.h"
#include "shm/tenant_table.h"

namespace marlaas::verifier {
namespace {

using pipeline::StageLog;
constexpr const char* kRole = "verifier";
// Records taken from a ring whose output is not yet committed. Committed ones wait, without
// counting, until every record before them is committed too (acks go in ring order): a slow
// record at the front holds back only its own tenant's later ones, and the ring's size bounds
// what waits behind it.
constexpr size_t kWindow = 64;
// Of the window, one tenant's records count up to this many: beyond it they are still taken (the
// ring's size bounds them) but leave the rest of the window to the others, so that a tenant with
// many groups in flight (prompts_per_step x (max_staleness + 1)) and a slow verifier does not
// stop the verifier reading every other tenant's records.
constexpr size_t kTenantShare = 16;

// tenant_key (PoolJob): the tenant id, the unit of fairness.
struct Job : PoolJob {
  uint32_t type = 0;
  int row = -1;
  uint64_t generation = 0;  // of the tenant in `row`
  std::shared_ptr<const pipeline::TaskSource> source;
  pb::TrajectoryGroup group;  // kGroupRecord
  pb::ToolCall call;          // kToolCallRecord
  pb::ToolResult result;      // output of a tool call
  std::string refuse;         // non-empty: untrusted work refused with this reason
  // PoolJob's `cancelled` is set by the stage's loop once the tenant is no longer running
  // (failed, stopped, finished or replaced): a queued job is then not run (CancelJob instead), so
  // that a failed tenant's backlog of slow verifications does not hold the workers from the
  // others. Its `busy_ns` is the job's wall time (the stage's utilisation).
  // Set by the worker: the CPU time, the worker thread's and its sandbox runs' (their process
  // trees), the cost the simulator's calibration records (shm/metrics.h work_ns, tool_ns).
  int64_t cpu_ns = 0;
};

struct Slot {
  RecordView view;
  std::shared_ptr<Job> job;  // null: nothing to output (a quarantined record)
  bool pushed = false;
  int64_t ready_ns = 0;  // --env-latency-ms: not returned before this (monotonic)
};

// One rollout replica's side: its ring in, its tool results out, and the records taken from its
// ring and not yet acknowledged (in ring order).
struct Input {
  std::string name;  // the ring's, for errors
  RingConsumer ring;
  RingProducer tools;
  std::deque<Slot> window;
  // The slots of `window` with a job whose output is not committed, in ring order: what Commit
  // looks at (not the committed ones waiting behind a slow record for their ack, which the ring
  // may hold many of). A deque's elements stay put when it grows at the back or shrinks at the
  // front, and a slot leaves the front only once committed.
  std::vector<Slot*> open;
  std::map<std::string, size_t> open_by_tenant;  // of `open`, by tenant
  size_t counted = 0;  // of `open`, what counts against kWindow: up to kTenantShare a tenant
  void Opened(const std::string& tenant) {
    if (open_by_tenant[tenant]++ < kTenantShare) ++counted;
  }
  void Closed(const std::string& tenant) {
    auto it = open_by_tenant.find(tenant);
    if (--it->second < kTenantShare) --counted;
    if (it->second == 0) open_by_tenant.erase(it);
  }
};

// A job whose tenant left before it ran: failed with the reason, not run.
void CancelJob(Job* job) {
  const std::string why = "verifier: tenant '" + job->tenant_key + "' is no longer running";
  if (job->type == pipeline::kToolCallRecord) {
    job->result.set_call_id(job->call.call_id());
    job->result.set_trajectory_id(job->call.trajectory_id());
    job->result.set_outcome(pb::OUTCOME_INFRA_ERROR);
    job->result.set_output("error: " + why);
  } else if (job->group.failure().empty()) {
    job->group.set_failure(why);
  }
}

void RunJobUnguarded(Job* job) {
  if (job->type == pipeline::kToolCallRecord) {
    job->result.set_call_id(job->call.call_id());
    job->result.set_trajectory_id(job->call.trajectory_id());
    if (!job->refuse.empty() && job->call.tool() == "python") {
      job->result.set_outcome(pb::OUTCOME_INFRA_ERROR);
      job->result.set_output("error: " + job->refuse);
      return;
    }
    sandbox::ParsedToolCall parsed;
    parsed.name = job->call.tool();
    parsed.input = job->call.input();
    sandbox::ToolOutput out = sandbox::ExecuteTool(parsed);
    job->cpu_ns += int64_t(out.cpu_ms * 1e6);
    job->result.set_outcome(out.outcome);
    job->result.set_output(out.output);
    job->result.set_truncated(out.truncated);
    return;
  }
  pb::TrajectoryGroup& g = job->group;
  if (!g.failure().empty()) return;  // the rollout already gave up on it
  if (!job->refuse.empty()) {
    g.set_failure("verifier: " + job->refuse);
    return;
  }
  const tasks::TaskExample example = job->source->Train(g.prompt_id());
  std::vector<std::string> completions;
  for (const pb::Trajectory& tr : g.trajectories()) completions.push_back(tr.completion_text());
  // The whole group at once: a task that runs code runs it in one sandbox.
  const std::vector<sandbox::Verdict> verdicts = job->source->VerifyAll(
      std::vector<const tasks::TaskExample*>(completions.size(), &example), completions);
  for (const sandbox::Verdict& v : verdicts) job->cpu_ns += int64_t(v.cpu_ms * 1e6);
  for (int i = 0; i < g.trajectories_size(); ++i) {
    pb::Trajectory& tr = *g.mutable_trajectories(i);
    const sandbox::Verdict& v = verdicts[size_t(i)];
    tr.set_outcome(v.outcome);
    tr.set_verifier_detail(v.detail.substr(0, 200));
    tr.set_reward(v.scored() ? float(v.reward) : 0.0f);
    if (!v.scored()) {
      // An infrastructure failure is never a score: the group cannot be trained on, and the
      // rest of it would fail the same way.
      g.set_failure("verifier failed (" + std::to_string(v.attempts) +
                    " attempts): " + v.detail.substr(0, 1200));
      return;
    }
  }
}

// A verifier that throws on some input (a task's parser, a tenant's data) fails that group or
// tool call with the reason; it never takes the stage down (the record would come back after the
// restart and take it down again).
void RunJob(Job* job) {
  try {
    RunJobUnguarded(job);
  } catch (const std::exception& e) {
    const std::string why = std::string("verifier: internal error: ") + e.what();
    if (job->type == pipeline::kToolCallRecord) {
      job->result.set_outcome(pb::OUTCOME_INFRA_ERROR);
      job->result.set_output("error: " + why.substr(0, 200));
    } else {
      job->group.set_failure(why.substr(0, 200));
    }
  }
}

class Verifier {
 public:
  Verifier(const pipeline::StageArgs& args, TenantTable table, MetricsSegment metrics,
           std::vector<Input> inputs, RingProducer scored, std::string refuse)
      : args_(args),
        table_(std::move(table)),
        metrics_(std::move(metrics)),
        inputs_(std::move(inputs)),
        scored_(std::move(scored)),
        watcher_(&table_, args.state_dir, kRole),
        refuse_(std::move(refuse)),
        pool_(
            args.verifier_workers, std::max(1, args.verifier_workers - 1),
            [](PoolJob* p) {
              Job* job = static_cast<Job*>(p);
              const int64_t cpu0 = ThreadCpuNanos();
              RunJob(job);
              job->cpu_ns += ThreadCpuNanos() - cpu0;
            },
            [](PoolJob* p) { CancelJob(static_cast<Job*>(p)); }) {}

  Status Run();

 private:
  std::shared_ptr<Job> MakeJob(const RecordView& view, const std::string& ring);
  // Takes records from `in` while its window has room; waits up to `wait_ms` for the first.
  void Fill(Input* in, int64_t wait_ms);
  // Commits what finished (each tenant's in ring order) and acknowledges the finished prefix;
  // returns whether it acknowledged anything.
  bool Commit(Input* in);
  void Finish(Slot* slot, RingProducer* tools);
  // Cancels the jobs not yet done whose tenant is no longer running (as of the last Poll).
  void CancelLeftTenants();
  // The counters of the tenant of `row` in `generation`, or null for a replaced generation.
  TenantMetrics* MetricsOf(int row, uint64_t generation);

  pipeline::StageArgs args_;
  TenantTable table_;
  MetricsSegment metrics_;
  std::vector<Input> inputs_;  // one per rollout replica
  RingProducer scored_;
  pipeline::TenantWatcher watcher_;
  std::string refuse_;
  std::map<std::pair<std::string, uint64_t>, std::shared_ptr<const pipeline::TaskSource>> sources_;
  std::map<int, TenantMetrics> tenant_metrics_;
  EngineMetrics engine_{};
  WorkerPool pool_;
  std::mt19937_64 latency_rng_{0x1a7e5eedULL};
  std::normal_distribution<double> latency_noise_{0.0, 1.0};
};

TenantMetrics* Verifier::MetricsOf(int row, uint64_t generation) {
  TenantMetrics& m = tenant_metrics_[row];
  if (m.generation != generation) {
    auto stored = metrics_.LoadTenant(row);
    // Generations of a row only grow: an older one is a replaced tenant's late group, whose
    // counters went with its row (overwriting the new tenant's would lose them).
    if (generation < std::max(m.generation, stored.ok() ? stored->generation : 0)) return nullptr;
    m = stored.ok() && stored->generation == generation ? *stored : TenantMetrics{};
    m.generation = generation;
  }
  return &m;
}

std::shared_ptr<Job> Verifier::MakeJob(const RecordView& view, const std::string& ring) {
  auto job = std::make_shared<Job>();
  job->type = view.type;
  Status st;
  std::string tenant;
  uint64_t generation = 0;
  if (view.type == pipeline::kGroupRecord) {
    st = pipeline::ParseRecord(view, &job->group, ring);
    tenant = job->group.tenant();
    generation = job->group.tenant_generation();
  } else if (view.type == pipeline::kToolCallRecord) {
    st = pipeline::ParseRecord(view, &job->call, ring);
    tenant = job->call.tenant();
  } else {
    st = Status(StatusCode::kCorrupt, "unexpected record type " + std::to_string(view.type));
  }
  if (!st.ok()) {
    StageLog(kRole, "quarantined: %s", st.ToString().c_str());
    ++engine_.errors;
    return nullptr;
  }
  const pipeline::WatchedTenant* w = nullptr;
  for (const auto& t : watcher_.tenants())
    if (tenant == t.record.id && (generation == 0 || generation == t.record.generation)) w = &t;
  if (w == nullptr) {
    watcher_.Poll();
    for (const auto& t : watcher_.tenants())
      if (tenant == t.record.id && (generation == 0 || generation == t.record.generation)) w = &t;
  }
  job->tenant_key = tenant;  // groups and tool calls of a tenant share its worker cap
  if (w == nullptr) {
    job->refuse = "tenant '" + tenant + "' is not admitted";
    if (view.type == pipeline::kGroupRecord) job->group.set_failure("verifier: " + job->refuse);
    return job;
  }
  job->row = w->row;
  job->generation = w->record.generation;
  const auto key = std::make_pair(std::string(w->record.id), w->record.generation);
  auto it = sources_.find(key);
  if (it == sources_.end()) {
    auto src = pipeline::TaskSource::ForJob(w->spec);
    if (!src.ok()) {
      job->refuse = "tenant's task cannot be loaded: " + src.status().ToString();
      return job;
    }
    it = sources_.emplace(key, std::shared_ptr<const pipeline::TaskSource>(std::move(*src))).first;
  }
  job->source = it->second;
  if (!refuse_.empty() &&
      (job->source->runs_untrusted_code() || view.type == pipeline::kToolCallRecord))
    job->refuse = refuse_;
  return job;
}

void Verifier::Finish(Slot* slot, RingProducer* tools) {
  Job& job = *slot->job;
  Status st;
  if (job.type == pipeline::kToolCallRecord) {
    st = pipeline::PushMessage(tools, pipeline::kToolResultRecord, job.result,
                               Deadline::AfterMs(50));
  } else {
    pipeline::FitGroupToRing(&job.group, scored_.max_record_bytes());
    st = pipeline::PushMessage(&scored_, pipeline::kGroupRecord, job.group, Deadline::AfterMs(50));
  }
  if (!st.ok()) return;  // downstream full or restarting: try again next round
  slot->pushed = true;
  engine_.busy_ns += uint64_t(job.busy_ns);
  ++engine_.items;
  // A cancelled job is no verifier error of its tenant's (which has left).
  if (job.row < 0 || job.cancelled.load()) return;
  TenantMetrics* counters = MetricsOf(job.row, job.generation);
  if (counters == nullptr) return;
  TenantMetrics& m = *counters;
  if (job.type != pipeline::kGroupRecord) {
    ++m.tool_calls;
    m.tool_ns += uint64_t(job.cpu_ns);
  } else if (!job.group.failure().empty()) {
    ++m.verifier_errors;
    pipeline::SetTenantError(pipeline::TenantDir(args_.state_dir, job.tenant_key), kRole,
                             job.group.failure(), &m);
  } else {
    ++m.groups;
    m.work_ns += uint64_t(job.cpu_ns);
    for (const pb::Trajectory& tr : job.group.trajectories()) {
      ++m.samples;
      ++m.reward_count;
      m.reward_sum += tr.reward();
      m.reward_sq_sum += double(tr.reward()) * tr.reward();
    }
  }
  (void)metrics_.StoreTenant(job.row, m);
}

Status Verifier::Run() {
  auto prev = metrics_.LoadEngine();
  engine_.started_mono_ns = MonotonicNanos();
  if (prev.ok() && prev->started_mono_ns != 0) engine_.restarts = prev->restarts + 1;
  if (prev.ok()) engine_.cost = prev->cost;  // the cost sums span restarts (shm/metrics.h)
  metrics_.StoreEngine(engine_);             // ready: serve's WaitUntilReady sees the start time
  int64_t next_poll = 0;
  while (!pipeline::StopRequested()) {
    if (MonotonicNanos() >= next_poll) {
      watcher_.Poll();
      CancelLeftTenants();
      next_poll = MonotonicNanos() + 200'000'000;
    }
    bool idle = true;
    for (const Input& in : inputs_) idle = idle && in.window.empty();
    // Idle: block on the ring for new work (with several rings, briefly on each in turn).
    const int64_t wait_ms = !idle ? 0 : inputs_.size() == 1 ? 20 : 1;
    for (Input& in : inputs_) Fill(&in, wait_ms);
    const uint64_t completions = pool_.completions();  // before the sweep: no wake-up is lost
    bool acked = false, waiting = false;
    size_t depth = 0;
    for (Input& in : inputs_) {
      acked = Commit(&in) || acked;
      waiting = waiting || !in.window.empty();
      depth += in.window.size();
    }
    // Nothing to hand on: wait for a job to finish, and look at the rings again within 250 us
    // (a flat 1 ms sleep here delayed every group by about 1 ms).
    if (waiting && !acked) pool_.WaitForCompletion(completions, std::chrono::microseconds(250));
    engine_.queue_depth = depth;
    engine_.updated_mono_ns = MonotonicNanos();
    metrics_.StoreEngine(engine_);
  }
  return Status::Ok();
}

void Verifier::CancelLeftTenants() {
  std::set<std::pair<std::string, uint64_t>> running;
  for (const pipeline::WatchedTenant& t : watcher_.tenants())
    if (!IsSettled(t.record.state)) running.emplace(t.record.id, t.record.generation);
  for (Input& in : inputs_) {
    for (Slot* s : in.open) {
      Job& job = *s->job;
      // Jobs refused at MakeJob (row < 0) are quick already; tool calls carry no generation.
      if (job.row < 0 || job.cancelled.load()) continue;
      if (!running.count({job.tenant_key, job.generation})) job.cancelled.store(true);
    }
  }
  pool_.Wake();
}

void Verifier::Fill(Input* in, int64_t wait_ms) {
  while (in->counted < kWindow) {
    auto rec = in->ring.Fetch(in->window.empty() && wait_ms > 0 ? Deadline::AfterMs(wait_ms)
                                                                : Deadline::Now());
    if (rec.ok()) {
      Slot s;
      s.view = *rec;
      s.job = MakeJob(*rec, in->name);
      if (args_.env_latency_ms > 0) {
        const double ms = args_.env_latency_ms * std::exp(0.5 * latency_noise_(latency_rng_));
        s.ready_ns = MonotonicNanos() + int64_t(ms * 1e6);
      }
      if (s.job) pool_.Submit(s.job);
      in->window.push_back(std::move(s));
      if (in->window.back().job) {
        in->open.push_back(&in->window.back());
        in->Opened(in->window.back().job->tenant_key);
      }
      continue;
    }
    if (rec.status().code() == StatusCode::kCorrupt) {
      std::string raw;
      (void)in->ring.Quarantine(&raw);
      StageLog(kRole, "quarantined a corrupt record of %s: %s", in->name.c_str(),
               rec.status().message().c_str());
      ++engine_.errors;
      continue;
    }
    return;
  }
}

bool Verifier::Commit(Input* in) {
  // Commit finished work as it comes, but each tenant's scored groups in ring order, and its
  // tool results in ring order (a tenant still waiting on an earlier group holds back only its
  // own later groups: its tool calls, which its completions wait for, go on).
  std::set<std::pair<std::string, uint32_t>> blocked;
  const int64_t now = MonotonicNanos();
  size_t kept = 0;
  for (Slot* s : in->open) {
    const auto stream = std::make_pair(s->job->tenant_key, s->job->type);
    if (!blocked.count(stream) && now >= s->ready_ns && pool_.IsDone(*s->job))
      Finish(s, &in->tools);
    if (!s->pushed) {
      blocked.insert(stream);
      in->open[kept++] = s;
    } else {
      in->Closed(s->job->tenant_key);
      s->job.reset();  // committed: only its place in the ring order is left to keep
    }
  }
  in->open.resize(kept);
  RecordView last;
  bool any = false;
  while (!in->window.empty() && (!in->window.front().job || in->window.front().pushed)) {
    last = in->window.front().view;
    any = true;
    in->window.pop_front();
  }
  if (any) in->ring.Ack(last);
  return any;
}

}  // namespace

Status RunVerifier(const pipeline::StageArgs& args) {
  const sandbox::IsolationPolicy policy =
      sandbox::DecideIsolationPolicy(sandbox::ProbeIsolation(), args.allow_weak_sandbox);
  if (!policy.warning.empty()) StageLog(kRole, "%s", policy.warning.c_str());
  if (!policy.refuse.empty()) StageLog(kRole, "%s", policy.refuse.c_str());
  std::string refuse = policy.refuse;
  MARLAAS_ASSIGN_OR_RETURN(TenantTable table, TenantTable::Attach(args.instance));
  MARLAAS_ASSIGN_OR_RETURN(MetricsSegment metrics,
                           MetricsSegment::Attach(args.instance, pipeline::kVerifierRole));
  std::vector<Input> inputs;
  for (int r = 0; r < args.rollout_replicas; ++r) {
    const std::string name = pipeline::TrajRingName(r);
    MARLAAS_ASSIGN_OR_RETURN(RingConsumer ring, RingConsumer::Attach({args.instance, name}));
    MARLAAS_ASSIGN_OR_RETURN(RingProducer tools,
                             RingProducer::Attach({args.instance, pipeline::ToolRingName(r)}));
    inputs.push_back(Input{name, std::move(ring), std::move(tools), {}, {}, {}, 0});
  }
  MARLAAS_ASSIGN_OR_RETURN(RingProducer scored,
                           RingProducer::Attach({args.instance, pipeline::kScoredRing}));
  // No sandboxes prepared ahead for a verifier that refuses untrusted work (read before the move).
  const int prepared = refuse.empty() ? args.prepared_sandboxes : 0;
  Verifier v(args, std::move(table), std::move(metrics), std::move(inputs), std::move(scored),
             std::move(refuse));
  sandbox::SetPreparedSandboxPool(prepared);
  StageLog(kRole, "ready (%d workers, %d sandboxes prepared ahead)", args.verifier_workers,
           prepared);
  return v.Run();
}

}  // namespace marlaas::verifier

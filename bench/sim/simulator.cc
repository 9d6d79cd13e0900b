#include "bench/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <set>

namespace marlaas::sim {
namespace {

// Poll intervals of the real stages, which the simulated ones wait for as they do.
constexpr double kRolloutSyncBusyS = 0.050;  // procs/rollout: SyncTenants while generating
constexpr double kRolloutSyncIdleS = 0.002;  // ... and while idle
constexpr double kRolloutLookS = 0.0005;     // idle, it looks for trainer steps and tool results
constexpr double kTrainerTableS = 0.002;     // procs/trainer: polls the tenant table
constexpr double kServiceTickS = 0.002;      // bench/pipeline_bench: the service loop
// A group's trip over a ring (rollout to verifier, verifier to trainer): the committing stage's
// flush, the futex wake of the reader and the record's parse. A trace of 1-tenant runs on the
// 2-core machine (2026-12-05) found 0.2-0.45 ms from the rollout's last pass of a group to its
// arrival at the trainer, both hops and an arithmetic check (10 us) together.
constexpr double kRingHopS = 0.00015;
constexpr double kToolAt = 0.8;           // a tool call comes 80% into its completion
constexpr double kToolResultTokens = 12;  // "<result>...</result>" rejoins with the context
constexpr double kEps = 1e-12;
// A bound on one simulation's events (each a pass's end or a timer): 4096 tenants of the quick
// set-up take 1.5 million; a profile whose passes take hours, polled every 2 ms, would take
// billions (hours of the simulator's time) without it.
constexpr uint64_t kMaxEvents = 100000000;

enum Engine { kRolloutEngine = 0, kTrainerEngine = 1, kVerifierEngine = 2 };

struct Tenant {
  int id = 0;
  const TaskCost* task = nullptr;
  int replica = 0, trainer = 0;
  bool admitted = false, adapter = false, finished = false;
  double admitted_at = 0;
  uint64_t version = 0, steps = 0;
  // Groups: started by the rollout, committed (fully generated), at the trainer, retired.
  uint64_t started = 0, committed = 0, retired = 0;
  std::deque<int> ready;  // groups at the trainer, in the order they arrived
  // What the rollout saw at its last sync.
  bool seen_adapter = false, seen_finished = false;
  uint64_t seen_retired = 0, round_quota = 0;
};

struct Group {
  int tenant = 0;
  int remaining = 0;
  // All its rewards equal (drawn at its start with the task's measured share): the trainer gets
  // no rows from it. Drawn per group, not spread as a fraction over every step: a step whose
  // groups are all degenerate takes no time, and with few tenants the rollout then cannot
  // generate behind it (the bubbles the measured 1-tenant runs have).
  bool degenerate = false;
};

struct Sequence {
  int group = 0;
  int tenant = 0;
  int length = 1, tool_at = -1, generated = 0;
  double prefill = 0;  // tokens to prefill at its next pass (0: decodes one token)
  // It joins with its group's prompt, which the group's first sequence computes in the same pass
  // (model::Generator): no tokens of its own in that pass.
  bool copies_prompt = false;
  // Its tool call's context is that of this sequence's (its own, or an earlier sibling's whose
  // call it shares, TaskCost::shared_tool_calls): resuming in the same pass, they compute once.
  int call_context = -1;
};

class Simulator {
 public:
  Simulator(const SimSetup& s, const CostProfile& p) : s_(s), p_(p), rng_(s.seed) {}

  Result<SimResult> Run();

 private:
  struct Work {
    int device = 0;
    double remaining = 0;  // seconds of work at full speed
    double started = 0;
    Engine engine = kRolloutEngine;
    std::function<void()> done;
  };
  struct Timer {
    double t;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Timer& o) const { return t != o.t ? t > o.t : seq > o.seq; }
  };
  struct Replica {
    int device = 0;
    bool busy = false;
    double last_end = -1;  // when its last pass ended: a pass after a longer gap is cold
    double wake_at = std::numeric_limits<double>::infinity();  // the earliest wake scheduled
    bool trainer_stepped = false;  // since its last sync: it syncs after the pass in progress
    double last_sync = -1;
    size_t next_rr = 0;
    std::vector<int> tenants;
    std::vector<int> active;    // sequences in the batch
    std::deque<int> returning;  // parked sequences whose tool result came back
    // It looks at its tool results (procs/rollout DrainToolResults) after each pass, and idle
    // when it wakes: a result that comes back meanwhile waits until then.
    bool look = false;
  };
  struct Trainer {
    int device = 0;
    bool busy = false;
    double last_end = -1;  // when its last step ended
    std::vector<int> tenants;
  };
  struct VerifierJob {
    int tenant = 0;
    int group = -1;     // a group to score, or
    int sequence = -1;  // a tool call of this sequence
    double arrived = 0;
    double release = 0;  // not before (env latency)
    bool done = false;
  };

  void At(double t, std::function<void()> fn) { timers_.push({t, timer_seq_++, std::move(fn)}); }
  // A pass of an engine whose last one ended at `last_end` (< 0: none yet) is cold after a gap
  // longer than CostSums::kColdAfterNs, as the stages classify theirs.
  bool Cold(double last_end) const {
    return last_end < 0 || now_ - last_end > double(CostSums::kColdAfterNs) * 1e-9;
  }
  void Start(int device, Engine e, double seconds, std::function<void()> done) {
    works_.push_back({device, std::max(seconds, 0.0), now_, e, std::move(done)});
  }
  void Kick();
  void KickReplica(Replica& r);
  void SyncReplica(Replica& r);
  // An idle rollout syncs and looks for work `delay` from now; `trainer`: a step of one of its
  // tenants (a busy rollout then syncs right after its pass).
  void WakeReplica(int replica, double delay, bool trainer = false);
  void StartGroups(Replica& r);
  void StartGroup(Replica& r, Tenant& t);
  void FinishPass(Replica& r, const std::vector<int>& batch);
  void SubmitVerifier(VerifierJob job);
  void KickVerifier();
  void ReleaseVerifierResults();
  void KickTrainer(Trainer& tr);
  // Rows and padded tokens of one training step: (tenant, rows it trains) for each stepping one.
  std::pair<double, double> PaddedBatch(std::vector<std::pair<int, double>> trained) const;
  void Admit(int tenant);
  void OnTenantFinished(Tenant& t);
  double Latency();

  const SimSetup& s_;
  const CostProfile& p_;
  std::mt19937_64 rng_;
  double now_ = 0;
  uint64_t timer_seq_ = 0;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  std::vector<Work> works_;
  std::vector<int> capacity_;  // per device
  std::vector<Tenant> tenants_;
  std::vector<Group> groups_;
  std::vector<Sequence> seqs_;
  std::vector<Replica> replicas_;
  std::vector<Trainer> trainers_;
  std::vector<VerifierJob> vjobs_;
  std::deque<int> vqueue_;  // job ids waiting for a worker
  // Per tenant and kind (groups, tool calls), its jobs in arrival order: each kind's results go
  // out in order, as the verifier commits them.
  std::map<std::pair<int, bool>, std::deque<int>> vpending_;
  std::map<int, int> vrunning_;  // per tenant, jobs running
  int vbusy_ = 0, verifier_device_ = 0;
  int finished_ = 0, next_admit_ = 0;
  double last_settled_ = 0;     // when the service had settled the last finished tenant
  double service_free_at_ = 0;  // the service settles one tenant at a time
  double busy_[3] = {0, 0, 0};
  SimResult result_;
};

double Simulator::Latency() {
  if (s_.env_latency_ms <= 0) return 0;
  std::normal_distribution<double> noise(0.0, 1.0);
  return s_.env_latency_ms * 1e-3 * std::exp(0.5 * noise(rng_));
}

void Simulator::Admit(int id) {
  Tenant& t = tenants_[size_t(id)];
  t.admitted = true;
  t.admitted_at = now_;
  // The trainer finds the tenant at its next table poll (on average half an interval), creates
  // its adapter and publishes version 0; the rollout starts it after its next sync.
  At(now_ + kTrainerTableS / 2, [this, id] {
    Tenant& t = tenants_[size_t(id)];
    t.adapter = true;
    WakeReplica(t.replica, kRolloutSyncIdleS / 2);  // a new tenant: its periodic sync
  });
}

void Simulator::WakeReplica(int replica, double delay, bool trainer) {
  Replica& r = replicas_[size_t(replica)];
  // A busy rollout looks again right after its pass (KickReplica); an idle one after `delay`,
  // and an earlier wake already covers a later one.
  if (r.busy) {
    r.trainer_stepped = r.trainer_stepped || trainer;
    return;
  }
  if (r.wake_at <= now_ + delay) return;
  r.wake_at = now_ + delay;
  At(r.wake_at, [this, replica] {
    Replica& r = replicas_[size_t(replica)];
    if (r.wake_at > now_ + kEps) return;  // superseded by an earlier wake that already ran
    r.wake_at = std::numeric_limits<double>::infinity();
    r.look = true;
    SyncReplica(r);
  });
}

void Simulator::SyncReplica(Replica& r) {
  r.last_sync = now_;
  r.trainer_stepped = false;
  for (int id : r.tenants) {
    Tenant& t = tenants_[size_t(id)];
    t.seen_adapter = t.adapter;
    t.seen_retired = t.retired;
    t.seen_finished = t.finished;
  }
}

void Simulator::StartGroup(Replica& r, Tenant& t) {
  const int g = int(groups_.size());
  std::uniform_real_distribution<double> u(0.0, 1.0);
  groups_.push_back({t.id, s_.group_size, u(rng_) < t.task->degenerate});
  ++t.started;
  const double mean = t.task->completion_tokens;
  // A call after the group's first shares that one's context with the chance that makes the
  // task's measured share of shared calls (ReproducibleShare: as much of it as can be).
  const double c = std::min(1.0, t.task->tool_calls);
  const double reproducible = ReproducibleShare(*t.task, s_.group_size);
  const double p_share =
      reproducible > kEps ? std::min(1.0, t.task->shared_tool_calls / reproducible) : 0;
  int first_call = -1;  // the group's first sequence with a tool call
  for (int i = 0; i < s_.group_size; ++i) {
    Sequence q;
    q.group = g;
    q.tenant = t.id;
    // Lengths floor(mean) or ceil(mean), in the proportion that keeps the task's mean.
    const double lo = std::floor(mean);
    q.length = std::max(1, int(lo) + (u(rng_) < mean - lo ? 1 : 0));
    if (u(rng_) < c && q.length >= 2) {
      const int id = int(seqs_.size());
      // (No draw when nothing is shared: a profile without shared calls keeps its stream.)
      if (first_call >= 0 && p_share > 0 && u(rng_) < p_share) {
        // The same tokens up to the same call; it goes on at least one token after it.
        q.call_context = first_call;
        q.tool_at = seqs_[size_t(first_call)].tool_at;
        q.length = std::max(q.length, q.tool_at + 1);
      } else {
        q.call_context = id;
        q.tool_at = std::clamp(int(std::lround(kToolAt * q.length)), 1, q.length - 1);
      }
      if (first_call < 0) first_call = id;
      ++result_.tool_calls;
      if (q.call_context != id) ++result_.tool_calls_shared;
    }
    q.prefill = i == 0 ? t.task->prompt_tokens : 0;
    q.copies_prompt = i > 0;
    r.active.push_back(int(seqs_.size()));
    seqs_.push_back(q);
  }
}

void Simulator::StartGroups(Replica& r) {
  if (r.tenants.empty()) return;
  const uint64_t P = uint64_t(s_.prompts_per_step);
  const uint64_t needed = uint64_t(s_.steps) * P;
  auto in_flight = [](const Tenant& t) { return t.started - std::min(t.started, t.seen_retired); };
  const bool lockstep = s_.mode != "async";
  if (lockstep) {
    bool round_open = false, busy = false;
    for (int id : r.tenants) {
      Tenant& t = tenants_[size_t(id)];
      if (t.seen_finished || !t.seen_adapter) t.round_quota = 0;
      round_open = round_open || t.round_quota > 0;
      busy = busy || in_flight(t) > 0;
    }
    if (!round_open && busy) return;
    if (!round_open) {
      for (int id : r.tenants) {
        const Tenant& t = tenants_[size_t(id)];
        if (t.admitted && !t.seen_finished && !t.seen_adapter) return;
      }
      for (int id : r.tenants) {
        Tenant& t = tenants_[size_t(id)];
        if (t.seen_finished || !t.seen_adapter || t.started >= needed) continue;
        t.round_quota = std::min<uint64_t>(P, needed - t.started);
      }
    }
  }
  const size_t cap = size_t(p_.max_active_sequences);
  bool progress = true;
  while (progress) {
    progress = false;
    const size_t n = r.tenants.size(), first = r.next_rr % n;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (first + k) % n;
      Tenant& t = tenants_[size_t(r.tenants[i])];
      if (t.seen_finished || !t.seen_adapter) continue;
      if (lockstep && t.round_quota == 0) continue;
      if (r.active.size() + size_t(s_.group_size) > cap && !r.active.empty()) {
        r.next_rr = i;
        return;
      }
      const uint64_t bound = uint64_t(s_.max_staleness + 1) * P;
      if (!lockstep && in_flight(t) >= bound) continue;
      if (t.started >= needed) continue;
      StartGroup(r, t);
      r.next_rr = (i + 1) % n;
      if (lockstep) --t.round_quota;
      progress = true;
    }
  }
}

void Simulator::KickReplica(Replica& r) {
  if (r.busy) return;
  // It syncs after a pass during which the trainer stepped one of its tenants, and every 50 ms
  // while generating; idle, WakeReplica syncs it.
  if (r.trainer_stepped || (!r.active.empty() && now_ - r.last_sync >= kRolloutSyncBusyS))
    SyncReplica(r);
  while (r.look && !r.returning.empty()) {
    r.active.push_back(r.returning.front());
    r.returning.pop_front();
  }
  r.look = false;
  StartGroups(r);
  if (r.active.empty()) return;  // idle: woken by the trainer, a tool result or an admission
  std::vector<int> batch = r.active;
  // Rows are sequences (model::StepShape); tokens are the computed ones.
  double tokens = 0, rows = double(batch.size());
  std::set<int> adapters, resumed;  // resumed: call contexts computed in this pass
  for (int q : batch) {
    const Sequence& sq = seqs_[size_t(q)];
    adapters.insert(sq.tenant);
    if (sq.copies_prompt) continue;
    // A sequence resuming after its tool call with a context computed in this pass copies it.
    if (sq.generated > 0 && sq.prefill > 0 && !resumed.insert(sq.call_context).second) continue;
    tokens += sq.prefill > 0 ? sq.prefill : 1;
  }
  r.busy = true;
  ++result_.forward_passes;
  const size_t self = size_t(&r - replicas_.data());
  Start(r.device, kRolloutEngine,
        p_.rollout.Seconds(rows, tokens, double(adapters.size()), Cold(r.last_end)),
        [this, self, batch] { FinishPass(replicas_[self], batch); });
}

void Simulator::FinishPass(Replica& r, const std::vector<int>& batch) {
  r.busy = false;
  r.look = true;
  r.last_end = now_;
  std::set<int> leaving;
  for (int id : batch) {
    Sequence& q = seqs_[size_t(id)];
    q.prefill = 0;
    q.copies_prompt = false;
    ++q.generated;
    if (q.generated == q.tool_at) {
      leaving.insert(id);
      VerifierJob job;
      job.tenant = q.tenant;
      job.sequence = id;
      SubmitVerifier(job);
    } else if (q.generated >= q.length) {
      leaving.insert(id);
      ++result_.samples;
      Group& g = groups_[size_t(q.group)];
      if (--g.remaining == 0) {
        ++tenants_[size_t(g.tenant)].committed;
        VerifierJob job;
        job.tenant = g.tenant;
        job.group = q.group;
        At(now_ + kRingHopS, [this, job] { SubmitVerifier(job); });
      }
    }
  }
  r.active.erase(std::remove_if(r.active.begin(), r.active.end(),
                                [&](int id) { return leaving.count(id) > 0; }),
                 r.active.end());
  // Idle now: its periodic sync (a trainer step during the pass is seen at once: KickReplica).
  if (r.active.empty()) WakeReplica(int(&r - replicas_.data()), kRolloutSyncIdleS / 2);
}

void Simulator::SubmitVerifier(VerifierJob job) {
  job.arrived = now_;
  job.release = now_ + Latency();
  const int id = int(vjobs_.size());
  vjobs_.push_back(job);
  vqueue_.push_back(id);
  vpending_[{job.tenant, job.group >= 0}].push_back(id);
}

void Simulator::KickVerifier() {
  const int cap = std::max(1, s_.verifier_workers - 1);
  for (auto it = vqueue_.begin(); it != vqueue_.end() && vbusy_ < s_.verifier_workers;) {
    VerifierJob& job = vjobs_[size_t(*it)];
    if (vrunning_[job.tenant] >= cap) {
      ++it;
      continue;
    }
    const int id = *it;
    it = vqueue_.erase(it);
    ++vbusy_;
    ++vrunning_[job.tenant];
    const TaskCost& task = *tenants_[size_t(job.tenant)].task;
    Start(verifier_device_, kVerifierEngine, job.group >= 0 ? task.verify_s : task.tool_s,
          [this, id] {
            VerifierJob& job = vjobs_[size_t(id)];
            --vbusy_;
            --vrunning_[job.tenant];
            job.done = true;
            if (job.release > now_) {
              At(job.release, [this] { ReleaseVerifierResults(); });
            } else {
              ReleaseVerifierResults();
            }
          });
  }
}

void Simulator::ReleaseVerifierResults() {
  for (auto& [stream, pending] : vpending_) {
    const int tenant = stream.first;
    while (!pending.empty()) {
      VerifierJob& job = vjobs_[size_t(pending.front())];
      if (!job.done || job.release > now_ + kEps) break;  // each kind's results go in order
      pending.pop_front();
      Tenant& t = tenants_[size_t(tenant)];
      if (job.group >= 0) {
        const int group = job.group, id = tenant;
        At(now_ + kRingHopS, [this, id, group] { tenants_[size_t(id)].ready.push_back(group); });
      } else {
        Sequence& q = seqs_[size_t(job.sequence)];
        q.prefill = t.task->prompt_tokens + q.generated + kToolResultTokens;
        Replica& r = replicas_[size_t(t.replica)];
        r.returning.push_back(job.sequence);
        WakeReplica(t.replica, kRolloutLookS / 2);
      }
    }
  }
}

std::pair<double, double> Simulator::PaddedBatch(
    std::vector<std::pair<int, double>> trained) const {
  // As rl::MultiTenantStep: tenants with rows to train by their rows' own part (after a shared
  // prompt), longest first, cut into buckets whose rows are padded to the bucket's first and
  // whose shared prompts to its longest prompt; a tenant joins while that at most doubles its
  // rows' part.
  trained.erase(std::remove_if(trained.begin(), trained.end(),
                               [](const std::pair<int, double>& t) { return t.second <= 0; }),
                trained.end());
  auto task = [this](const std::pair<int, double>& t) -> const TaskCost& {
    return *tenants_[size_t(t.first)].task;
  };
  auto length = [&](const std::pair<int, double>& t) {
    const TaskCost& c = task(t);
    return c.trained_tokens - c.prompt_rows * c.prompt_row_tokens;
  };
  std::stable_sort(trained.begin(), trained.end(),
                   [&](const auto& a, const auto& b) { return length(a) > length(b); });
  double rows = 0, tokens = 0;
  for (size_t i = 0; i < trained.size();) {
    size_t j = i + 1;
    while (j < trained.size() && length(trained[j]) * 2 >= length(trained[i])) ++j;
    double prompt = 0;  // the bucket's longest shared prompt
    for (size_t k = i; k < j; ++k) prompt = std::max(prompt, task(trained[k]).prompt_row_tokens);
    for (size_t k = i; k < j; ++k) {
      rows += trained[k].second;
      tokens += trained[k].second * (length(trained[i]) + task(trained[k]).prompt_rows * prompt);
    }
    i = j;
  }
  return {rows, tokens};
}

void Simulator::KickTrainer(Trainer& tr) {
  if (tr.busy) return;
  const uint64_t P = uint64_t(s_.prompts_per_step);
  if (s_.mode != "async") {
    // Not while a group its round started is still on its way.
    for (int id : tr.tenants) {
      const Tenant& t = tenants_[size_t(id)];
      if (t.finished || t.ready.size() >= P) continue;
      if (t.started > t.retired + t.ready.size()) return;
    }
  }
  std::vector<int> stepping;
  for (int id : tr.tenants) {
    const Tenant& t = tenants_[size_t(id)];
    if (t.finished || !t.adapter || t.ready.size() < P) continue;
    stepping.push_back(id);
  }
  if (stepping.empty()) return;
  std::vector<std::pair<int, double>> trained;  // tenant, rows it trains in this step
  for (int id : stepping) {
    Tenant& t = tenants_[size_t(id)];
    double rows = 0;
    for (uint64_t k = 0; k < P; ++k) {
      if (!groups_[size_t(t.ready.front())].degenerate) rows += s_.group_size;
      t.ready.pop_front();
    }
    trained.emplace_back(id, rows);
  }
  const double training = double(
      std::count_if(trained.begin(), trained.end(), [](const auto& t) { return t.second > 0; }));
  const auto [rows, tokens] = PaddedBatch(std::move(trained));
  tr.busy = true;
  ++result_.train_steps;
  const size_t self = size_t(&tr - trainers_.data());
  double checkpoints = 0;  // as the trainer: every checkpoint_every steps, and after the last
  for (int id : stepping) {
    const uint64_t step = tenants_[size_t(id)].steps + 1;
    if (step >= uint64_t(s_.steps) || step % uint64_t(s_.checkpoint_every) == 0) ++checkpoints;
  }
  Start(tr.device, kTrainerEngine,
        p_.trainer.Seconds(rows, tokens, training, training > 0 && Cold(tr.last_end)) +
            checkpoints * p_.checkpoint_s,
        [this, self, stepping, P] {
          Trainer& tr = trainers_[self];
          tr.busy = false;
          tr.last_end = now_;
          for (int id : stepping) {
            Tenant& t = tenants_[size_t(id)];
            ++t.version;
            ++t.steps;
            t.retired += P;
            if (t.steps >= uint64_t(s_.steps)) OnTenantFinished(t);
            const int replica = t.replica;
            const bool remote =
                p_.placement == "accelerator" && replicas_[size_t(replica)].device != tr.device;
            if (remote && p_.adapter_sync_s > 0) {
              At(now_ + p_.adapter_sync_s,
                 [this, replica] { WakeReplica(replica, kRolloutLookS / 2, true); });
            } else {
              WakeReplica(replica, kRolloutLookS / 2, true);
            }
          }
        });
}

void Simulator::OnTenantFinished(Tenant& t) {
  t.finished = true;
  ++finished_;
  // The service sees it at its next tick and settles it (settle_s), one tenant after another;
  // only then does the table show it, for the next admission or the run's end.
  const double settled = std::max(now_ + kServiceTickS / 2, service_free_at_) + p_.settle_s;
  service_free_at_ = settled;
  last_settled_ = std::max(last_settled_, settled);
  if (s_.mode == "sequential_sync" && next_admit_ < int(tenants_.size())) {
    const int next = next_admit_++;
    At(settled + p_.admit_s, [this, next] { Admit(next); });
  }
}

void Simulator::Kick() {
  for (Replica& r : replicas_) KickReplica(r);
  KickVerifier();
  for (Trainer& tr : trainers_) KickTrainer(tr);
}

Result<SimResult> Simulator::Run() {
  const int n = int(s_.tasks.size());
  // Devices and engines.
  int replicas = 1, trainers = 1;
  if (p_.placement == "accelerator") {
    if (s_.gpus >= 2) {
      trainers = std::max(1, s_.gpus / 4);
      replicas = s_.gpus - trainers;
    }
    for (int d = 0; d < std::max(1, s_.gpus); ++d) capacity_.push_back(1);
    capacity_.push_back(p_.host_cores);
    verifier_device_ = int(capacity_.size()) - 1;
    for (int i = 0; i < replicas; ++i) {
      replicas_.emplace_back();
      replicas_.back().device = i;
    }
    for (int i = 0; i < trainers; ++i) {
      trainers_.emplace_back();
      trainers_.back().device = s_.gpus >= 2 ? replicas + i : 0;
    }
  } else {
    capacity_.push_back(p_.cores);
    replicas_.emplace_back();
    trainers_.emplace_back();
  }
  result_.rollout_replicas = replicas;
  result_.trainers = trainers;
  for (int k = 0; k < n; ++k) {
    Tenant t;
    t.id = k;
    t.task = &p_.tasks.at(s_.tasks[size_t(k)]);
    t.replica = k % replicas;
    t.trainer = k % trainers;
    replicas_[size_t(t.replica)].tenants.push_back(k);
    trainers_[size_t(t.trainer)].tenants.push_back(k);
    tenants_.push_back(t);
  }
  // Admitting takes the service admit_s a tenant; admitted together, the tenants appear at once
  // when the last is done (Service::AdmitTogether).
  if (s_.mode == "sequential_sync") {
    next_admit_ = 1;
    At(p_.admit_s, [this] { Admit(0); });
  } else {
    At(n * p_.admit_s, [this, n] {
      for (int k = 0; k < n; ++k) Admit(k);
    });
    next_admit_ = n;
  }
  std::vector<int> active_on(capacity_.size());
  uint64_t events = 0;
  while (finished_ < n) {
    if (++events > kMaxEvents) {
      return Status(StatusCode::kResourceExhausted,
                    "simulation passed " + std::to_string(kMaxEvents) + " events at " +
                        std::to_string(now_) + " simulated s with " + std::to_string(finished_) +
                        " of " + std::to_string(n) +
                        " tenants finished: the set-up or the cost profile's costs are too large "
                        "to simulate");
    }
    Kick();
    std::fill(active_on.begin(), active_on.end(), 0);
    for (const Work& w : works_) ++active_on[size_t(w.device)];
    auto rate = [&](const Work& w) {
      return std::min(1.0, double(capacity_[size_t(w.device)]) / active_on[size_t(w.device)]);
    };
    double next = timers_.empty() ? std::numeric_limits<double>::infinity() : timers_.top().t;
    for (const Work& w : works_) next = std::min(next, now_ + w.remaining / rate(w));
    if (!std::isfinite(next)) {
      return Status(StatusCode::kInternal, "simulation stalled at " + std::to_string(now_) +
                                               " s with " + std::to_string(finished_) + " of " +
                                               std::to_string(n) + " tenants finished");
    }
    if (next > s_.timeout_s) break;
    const double dt = std::max(0.0, next - now_);
    for (Work& w : works_) w.remaining -= dt * rate(w);
    now_ = std::max(now_, next);
    // Finished work first (its engine frees up), then the timers due now.
    std::vector<Work> done;
    for (auto it = works_.begin(); it != works_.end();) {
      if (it->remaining <= kEps) {
        busy_[it->engine] += now_ - it->started;
        done.push_back(std::move(*it));
        it = works_.erase(it);
      } else {
        ++it;
      }
    }
    for (Work& w : done) w.done();
    while (!timers_.empty() && timers_.top().t <= now_ + kEps) {
      Timer t = timers_.top();
      timers_.pop();
      t.fn();
    }
  }
  result_.complete = finished_ == n;
  // The run ends when the service has settled the last tenant (its next tick, then settle_s).
  result_.wall_s = result_.complete ? last_settled_ : now_ + kServiceTickS / 2;
  result_.util_rollout = busy_[kRolloutEngine] / (result_.wall_s * replicas);
  result_.util_trainer = busy_[kTrainerEngine] / (result_.wall_s * trainers);
  result_.util_verifier = busy_[kVerifierEngine] / result_.wall_s;
  return result_;
}

}  // namespace

double ReproducibleShare(const TaskCost& task, int group_size) {
  const double c = std::clamp(task.tool_calls, 0.0, 1.0), g = double(group_size);
  const double calls = g * c;
  return calls > kEps ? (calls - (1.0 - std::pow(1.0 - c, g))) / calls : 0;
}

Result<SimResult> Simulate(const SimSetup& setup, const CostProfile& profile) {
  if (setup.mode != "sequential_sync" && setup.mode != "multi_tenant_sync" && setup.mode != "async")
    return Status(StatusCode::kInvalidArgument, "simulate: unknown mode '" + setup.mode + "'");
  if (setup.tasks.empty()) return Status(StatusCode::kInvalidArgument, "simulate: no tenants");
  for (const std::string& t : setup.tasks) {
    if (!profile.tasks.count(t))
      return Status(StatusCode::kInvalidArgument,
                    "simulate: the cost profile has no costs for task '" + t + "'");
  }
  if (setup.steps < 1 || setup.group_size < 1 || setup.prompts_per_step < 1 ||
      setup.max_staleness < 0 || setup.checkpoint_every < 1 || setup.verifier_workers < 1 ||
      setup.gpus < 1 || profile.max_active_sequences < setup.group_size || profile.cores < 1)
    return Status(StatusCode::kInvalidArgument,
                  "simulate: steps, group_size, prompts_per_step, checkpoint_every, "
                  "verifier_workers, gpus and "
                  "cores must be positive, and a group must fit max_active_sequences");
  Simulator sim(setup, profile);
  return sim.Run();
}

Result<SimResult> SimulateMean(const SimSetup& setup, const CostProfile& profile, int replicates) {
  if (replicates < 1)
    return Status(StatusCode::kInvalidArgument, "simulate: replicates must be positive");
  SimResult mean;
  mean.complete = true;
  double samples = 0, passes = 0, steps = 0, calls = 0, shared = 0;
  for (int k = 0; k < replicates; ++k) {
    SimSetup s = setup;
    s.seed = setup.seed + uint64_t(k);
    MARLAAS_ASSIGN_OR_RETURN(SimResult r, Simulate(s, profile));
    mean.complete = mean.complete && r.complete;
    mean.wall_s += r.wall_s / replicates;
    mean.util_rollout += r.util_rollout / replicates;
    mean.util_trainer += r.util_trainer / replicates;
    mean.util_verifier += r.util_verifier / replicates;
    samples += double(r.samples) / replicates;
    passes += double(r.forward_passes) / replicates;
    steps += double(r.train_steps) / replicates;
    calls += double(r.tool_calls) / replicates;
    shared += double(r.tool_calls_shared) / replicates;
    mean.rollout_replicas = r.rollout_replicas;
    mean.trainers = r.trainers;
  }
  mean.samples = uint64_t(std::llround(samples));
  mean.forward_passes = uint64_t(std::llround(passes));
  mean.train_steps = uint64_t(std::llround(steps));
  mean.tool_calls = uint64_t(std::llround(calls));
  mean.tool_calls_shared = uint64_t(std::llround(shared));
  return mean;
}

}  // namespace marlaas::sim

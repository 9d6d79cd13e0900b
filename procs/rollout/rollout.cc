#include "procs/rollout/rollout.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <unordered_map>

#include "base/cpu_time.h"
#include "base/process.h"
#include "model/base_weights.h"
#include "model/compute_threads.h"
#include "model/device.h"
#include "model/device_base.h"
#include "model/generator.h"
#include "model/lora_adapter.h"
#include "model/tokenizer.h"
#include "model/torch_error.h"
#include "model/transformer.h"
#include "procs/common/stage_device.h"
#include "procs/common/task_source.h"
#include "procs/common/tenant_error.h"
#include "procs/common/tenant_watcher.h"
#include "procs/rollout/active_limit.h"
#include "procs/rollout/adapter_inbox.h"
#include "sandbox/tool_syntax.h"
#include "shm/adapter_store.h"
#include "shm/metrics.h"
#include "shm/tenant_table.h"

namespace marlaas::rollout {
namespace {

using pipeline::StageLog;
constexpr const char* kRole = "rollout";
constexpr size_t kMaxActiveSequences = 96;

struct RolloutTenant {
  int row = -1;
  std::string id;
  uint64_t generation = 0;
  pb::JobSpec spec;
  std::unique_ptr<pipeline::TaskSource> source;
  AdapterLayout layout{};
  std::shared_ptr<const model::LoraAdapter> adapter;  // latest published
  // The trainer's counters of this generation have been read: pacing starts from its retired
  // count (after a restart of the whole service, from its checkpoint's), so no group starts
  // before. Groups started earlier were counted from 0, and then went stale.
  bool trainer_seen = false;
  uint64_t version = 0;
  uint64_t open_groups = 0;          // started here, not yet committed
  std::deque<uint64_t> start_order;  // open groups' ids, oldest first
  uint64_t retired = 0;              // trainer: trained + dropped
  uint64_t dropped = 0;              // trainer: dropped
  bool finished = false;             // trainer reached max_steps, or the tenant left
  // Why this replica cannot serve the tenant ("" while it can): its task cannot be loaded, or a
  // prompt encodes to nothing. It then starts nothing; metrics.last_error tells serve, which
  // fails the tenant.
  std::string unservable;
  uint64_t round_quota = 0;  // lockstep: groups still to start in the current round
  TenantMetrics metrics{};   // ours: groups committed, cursor, samples, tokens
};

struct OpenGroup {
  RolloutTenant* tenant;
  pb::TrajectoryGroup group;
  int remaining = 0;
  // The context of every tool call its completions made (TenantMetrics::tool_calls_shared).
  std::vector<std::vector<int32_t>> call_contexts;
};

struct Sequence {
  uint64_t id;  // the generator request id
  OpenGroup* group;
  int index;  // in the group
  std::shared_ptr<const model::LoraAdapter> adapter;
  std::vector<int32_t> tokens;  // prompt + everything since
  std::vector<float> logprobs;
  std::vector<uint8_t> mask;
  uint32_t prompt_tokens = 0;
  int generated = 0;
  int tool_turns = 0;
  int set_asides = 0;  // times taken out of the generator for memory (ActiveLimit)
  uint64_t seed = 0;
  pb::Trajectory* traj;       // inside group->group
  uint64_t waiting_call = 0;  // parked on this tool call
  int64_t parked_at = 0;
};

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t x = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  return x ^ (x >> 29);
}

class Rollout {
 public:
  Rollout(const pipeline::StageArgs& args, std::shared_ptr<const model::BaseWeights> base,
          model::Tokenizer tok, TenantTable table, AdapterStore store, MetricsSegment metrics,
          MetricsSegment trainer_metrics, RingProducer out, RingConsumer tool_results)
      : args_(args),
        base_(std::move(base)),
        model_(base_),
        gen_(model_),
        tok_(std::move(tok)),
        table_(std::move(table)),
        store_(std::move(store)),
        metrics_(std::move(metrics)),
        trainer_metrics_(std::move(trainer_metrics)),
        out_(std::move(out)),
        tool_results_(std::move(tool_results)),
        watcher_(&table_, args.state_dir, kRole) {
    const ProcessIdentity self = SelfIdentity();
    incarnation_ = uint32_t(Mix(uint64_t(self.pid), self.start_ticks));
    stops_ = tok_.Encode("\n");
    if (auto eot = tok_.TokenId("<|endoftext|>")) stops_.push_back(*eot);
    if (auto t = tok_.TokenId(sandbox::kToolCallEnd)) {
      tool_end_ = *t;
      stops_.push_back(*t);
    }
  }

  Status Run();
  void SetInbox(std::unique_ptr<AdapterInbox> inbox) { inbox_ = std::move(inbox); }
  // Before the stage reports ready: a small generation through the stage's own generator (a
  // prefill of several rows, then decode steps), half the rows on the base model and half with a
  // throwaway adapter, so the first tenant's first passes do not pay LibTorch's, the BLAS's, the
  // multi-LoRA path's and the generator's KV arena's one-time costs. Touches no tenant, segment
  // or metric; the generator is empty again when it returns.
  Status WarmUp() {
    MARLAAS_ASSIGN_OR_RETURN(model::LoraAdapter warm_adapter,
                             model::LoraAdapter::Create(*base_, 8, 16, (1u << kNumLoraTargets) - 1,
                                                        /*seed=*/1));
    warm_adapter.MoveTo(model_.device());
    auto adapter = std::make_shared<const model::LoraAdapter>(std::move(warm_adapter));
    const int32_t vocab = int32_t(base_->config.vocab_size);
    for (uint64_t row = 0; row < 16; ++row) {
      model::GenerationRequest req;
      req.id = row + 1;  // the generator is empty: any ids unique among these
      for (int32_t i = 0; i < 24; ++i) req.prompt.push_back(int32_t((row * 31 + i * 7) % vocab));
      if (row % 2 == 1) req.adapter = adapter;
      req.seed = row + 1;
      req.max_new_tokens = 8;
      gen_.Add(std::move(req));
    }
    while (gen_.active() > 0) gen_.Step();
    return Status::Ok();
  }

 private:
  void SyncTenants();
  void RefreshAdapter(RolloutTenant* t);
  void StartGroups();
  void StartGroup(RolloutTenant* t);
  // Stops serving `t` for good and reports why (RolloutTenant::unservable).
  void MarkUnservable(RolloutTenant* t, const std::string& why);
  // Into the generator; false (and set aside) when memory ran out placing it (its adapter in a
  // device's LoraPool).
  bool AddToGenerator(Sequence* s);
  // Into the generator while it holds fewer than the limit, else set aside.
  void Enqueue(Sequence* s);
  // What the generator produced for `s` (all of it, or up to where it was taken out).
  void AppendGenerated(Sequence* s, const model::GenerationResult& r);
  void OnFinished(model::GenerationResult& r);
  // A generation pass ran out of memory (`what`): the newest sequences are set aside (ActiveLimit),
  // or, with one left that failed alone too often, its tenant is not served.
  void OnOutOfMemory(const std::string& what);
  // `s` ran out of memory with nothing else in the generator (ActiveLimit counted it): tried
  // again after a pause, or, the kAloneTries-th time, its tenant is not served.
  void OutOfMemoryAlone(Sequence* s, const std::string& what);
  // Sequences set aside go back into the generator, oldest first, as the limit allows.
  void ResumeSetAside();
  // Everything of `t` still here goes: its sequences (generating, set aside, waiting on a tool)
  // and open groups. For a tenant that cannot be served.
  void DropTenantWork(RolloutTenant* t);
  void FinishSequence(Sequence* s);
  void DrainToolResults();
  void ExpireToolCalls();
  void FlushOutputs();
  void StoreMetrics();

  pipeline::StageArgs args_;
  std::shared_ptr<const model::BaseWeights> base_;
  model::Transformer model_;
  model::Generator gen_;
  model::Tokenizer tok_;
  TenantTable table_;
  AdapterStore store_;
  // --adapter-broadcast: adapters the trainer broadcast to this replica's GPU (else null).
  std::unique_ptr<AdapterInbox> inbox_;
  MetricsSegment metrics_;
  MetricsSegment trainer_metrics_;
  RingProducer out_;
  RingConsumer tool_results_;
  pipeline::TenantWatcher watcher_;
  bool tenants_held_ = false;  // a tenant of the table is admitted but held (kAdmitted)
  uint32_t incarnation_;
  std::vector<int32_t> stops_;
  int32_t tool_end_ = -1;

  std::map<int, std::unique_ptr<RolloutTenant>> tenants_;
  std::vector<std::unique_ptr<RolloutTenant>> replaced_;  // rows since reused (see SyncTenants)
  std::unordered_map<uint64_t, std::unique_ptr<OpenGroup>> groups_;  // by group id
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;     // by generator id
  std::unordered_map<uint64_t, uint64_t> parked_;                    // call id -> seq id
  ActiveLimit active_limit_{kMaxActiveSequences};
  std::set<uint64_t> set_aside_;  // seq ids out of the generator for memory, resumed in id order
  int64_t add_failure_logged_ns_ = 0;                    // AddToGenerator's last out-of-memory line
  std::deque<std::pair<uint32_t, std::string>> outbox_;  // (type, serialised) not yet committed
  std::deque<std::pair<RolloutTenant*, uint64_t>> outbox_groups_;  // tenant per group record
  uint64_t next_seq_id_ = 1, next_group_ = 0, next_call_ = 1;
  size_t next_tenant_rr_ = 0;
  EngineMetrics engine_{};
  // Set when this process cannot go on (a device copy of an adapter that may still land in
  // stuck_copy_): Run returns it.
  Status fatal_;
  at::Tensor stuck_copy_;
};

void Rollout::RefreshAdapter(RolloutTenant* t) {
  auto published = store_.PublishedVersion(t->row);
  if (!published.ok() || *published <= t->version) return;
  auto info = store_.Info(t->row);
  if (!info.ok() || !info->active || t->id != info->tenant_id) return;
  if (inbox_ != nullptr) {
    // The trainer's broadcast of exactly this version, already on our device: no store copy.
    at::Tensor flat =
        inbox_->Take(t->row, info->generation, *published, int64_t(info->layout.NumElements()));
    if (flat.defined()) {
      auto adapter = model::LoraAdapter::FromFlatTensor(info->layout, std::move(flat));
      if (adapter.ok()) {
        t->adapter = std::make_shared<const model::LoraAdapter>(std::move(*adapter));
        t->version = *published;
        t->metrics.adapter_version = t->version;
        return;
      }
    }
  }
  // A CUDA IPC store copies device to device, straight into the adapter's own tensor; a host
  // store copies into host memory (a LoraPool on a GPU then copies it in once).
  const bool on_device = store_.backend() == AdapterBackend::kCudaIpc;
  auto flat = torch::empty({int64_t(info->layout.NumElements())},
                           torch::TensorOptions(torch::kFloat32)
                               .device(on_device ? model_.device() : torch::Device(torch::kCPU)));
  // The store copies on its own stream: memory LibTorch's allocator just handed out may still be
  // in use by work queued on the default stream (the pool's copies), so that work finishes first.
  if (on_device) torch::cuda::synchronize();
  AdapterSlotInfo owner;
  auto got = store_.ReadLatest(t->row, flat.data_ptr(), size_t(flat.numel()) * sizeof(float),
                               Deadline::AfterMs(100), &owner);
  if (!got.ok() && on_device && got.status().code() == StatusCode::kInternal) {
    // A device copy that did not finish (or a CUDA error) may still write into `flat`: it is
    // never freed, and the rollout ends so that serve restarts it with a fresh device context.
    stuck_copy_ = std::move(flat);
    fatal_ = Status(StatusCode::kInternal,
                    "tenant " + t->id + ": reading its adapter: " + got.status().message());
    return;
  }
  // The slot may have gone to the tenant that reuses our row since Info().
  if (!got.ok() || t->id != owner.tenant_id || owner.generation != info->generation) return;
  auto adapter = model::LoraAdapter::FromFlatTensor(info->layout, std::move(flat));
  if (!adapter.ok()) {
    StageLog(kRole, "tenant %s: bad adapter: %s", t->id.c_str(),
             adapter.status().ToString().c_str());
    return;
  }
  t->adapter = std::make_shared<const model::LoraAdapter>(std::move(*adapter));
  t->version = *got;
  t->metrics.adapter_version = t->version;
}

void Rollout::SyncTenants() {
  // Device adapter buffers (CUDA IPC store) that the trainer retired, or whose trainer died, are
  // let go here so their memory returns; the host store has nothing to let go.
  store_.Sweep();
  const auto& watched = watcher_.Poll();
  std::map<int, bool> seen;
  tenants_held_ = false;
  for (const pipeline::WatchedTenant& w : watched) {
    tenants_held_ = tenants_held_ || w.record.state == TenantState::kAdmitted;
    // Another replica's tenant (pipeline::ReplicaOfRow).
    if (pipeline::ReplicaOfRow(w.row, args_.rollout_replicas) != args_.replica) continue;
    seen[w.row] = true;
    auto it = tenants_.find(w.row);
    if (it == tenants_.end() || it->second->generation != w.record.generation) {
      if (w.record.state != TenantState::kRunning) continue;
      auto t = std::make_unique<RolloutTenant>();
      t->row = w.row;
      t->id = w.record.id;
      t->generation = w.record.generation;
      t->spec = w.spec;
      auto old = metrics_.LoadTenant(w.row);
      if (old.ok() && old->generation == w.record.generation) t->metrics = *old;
      t->metrics.generation = w.record.generation;
      auto src = pipeline::TaskSource::ForJob(w.spec);
      if (src.ok()) {
        t->source = std::move(*src);
      } else {
        MarkUnservable(t.get(), "task cannot be loaded: " + src.status().ToString());
      }
      // A row reused by a new tenant: the old one's open groups and queued records still point
      // at its state, so it is kept (finished) rather than freed.
      if (it != tenants_.end()) {
        it->second->finished = true;
        replaced_.push_back(std::move(it->second));
      }
      it = tenants_.insert_or_assign(w.row, std::move(t)).first;
    }
    RolloutTenant* t = it->second.get();
    t->finished = w.record.state != TenantState::kRunning || !t->unservable.empty();
    auto tm = trainer_metrics_.LoadTenant(w.row);
    if (tm.ok() && tm->generation == t->generation) {
      t->trainer_seen = true;
      // A tenant resumed from checkpoints continues its data stream where training left it.
      t->metrics.cursor = std::max(t->metrics.cursor, tm->cursor);
      t->retired = tm->groups + tm->groups_dropped;
      t->dropped = tm->groups_dropped;
      // Every group the trainer retired was committed, by us or by a rollout before a restart of
      // the service (whose counts went with its segments): pacing counts from there. Otherwise a
      // resumed tenant's committed count started at 0, below the retired one, and its groups in
      // flight were never counted against the staleness bound.
      t->metrics.groups = std::max(t->metrics.groups, t->retired);
      if (tm->steps >= t->spec.max_steps()) t->finished = true;
    }
    try {
      RefreshAdapter(t);
    } catch (const std::exception& e) {
      // No memory for the copy now: the tenant's current adapter stays, and the next sync tries
      // again.
      if (!model::IsOutOfMemory(e)) throw;
      StageLog(kRole, "tenant %s: no memory to read its new adapter now: %s", t->id.c_str(),
               model::TorchErrorLine(e).c_str());
    }
  }
  for (auto& [row, t] : tenants_)
    if (!seen.count(row)) t->finished = true;
  // Replaced tenants go once nothing refers to them: no open group, no record in the outbox.
  auto unreferenced = [&](const std::unique_ptr<RolloutTenant>& t) {
    if (t->open_groups > 0) return false;
    for (const auto& [tenant, group_id] : outbox_groups_)
      if (tenant == t.get()) return false;
    return true;
  };
  replaced_.erase(std::remove_if(replaced_.begin(), replaced_.end(), unreferenced),
                  replaced_.end());
}

void Rollout::StartGroups() {
  // Sequences set aside for memory go first: nothing new starts before them.
  if (tenants_.empty() || !set_aside_.empty()) return;
  // Its adapter, and the trainer's counts to pace from.
  auto servable = [](const RolloutTenant* t) { return t->adapter && t->trainer_seen; };
  std::vector<RolloutTenant*> order;
  for (auto& [row, t] : tenants_) order.push_back(t.get());
  auto in_flight_of = [](const RolloutTenant* t) {
    const uint64_t committed = t->metrics.groups;
    return committed + t->open_groups - std::min(committed, t->retired);
  };
  auto needed_of = [](const RolloutTenant* t) {
    return uint64_t(t->spec.max_steps()) * t->spec.prompts_per_step() + t->dropped;
  };
  if (args_.lockstep) {
    // A round ends when every group started in it has been trained; then every unfinished tenant
    // gets its next step's groups (started as the batch has room).
    bool round_open = false, busy = false;
    for (RolloutTenant* t : order) {
      if (t->finished || !servable(t)) t->round_quota = 0;  // stopped mid-round: not waited for
      round_open = round_open || t->round_quota > 0;
      busy = busy || in_flight_of(t) > 0;
    }
    if (!round_open && busy) return;
    if (!round_open) {
      // Tenants admitted together (Service::AdmitTogether) are held until all of them are in the
      // table: the round waits, so it takes all of them, not the first few.
      if (tenants_held_) return;
      // A round takes every running tenant: wait until each has its first adapter and counts.
      for (const RolloutTenant* t : order)
        if (!t->finished && !servable(t)) return;
      for (RolloutTenant* t : order) {
        const uint64_t started = t->metrics.groups + t->open_groups;
        if (t->finished || !servable(t) || started >= needed_of(t)) continue;
        t->round_quota = std::min<uint64_t>(t->spec.prompts_per_step(), needed_of(t) - started);
      }
    }
  }
  // Round-robin over tenants, one group each per turn, while the batch has room. The turn passes
  // to the tenant after the one served, and a full batch leaves it with the tenant that could not
  // start: otherwise the slots a finished group frees went to the first tenants in the order
  // every time, and the last ones starved (an 8-tenant demo had four tenants at step 30-60 and
  // the other four at 0-2).
  bool progress = true;
  while (progress) {
    progress = false;
    const size_t first = next_tenant_rr_ % order.size();
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t i = (first + k) % order.size();
      RolloutTenant* t = order[i];
      if (t->finished || !servable(t)) continue;
      if (args_.lockstep && t->round_quota == 0) continue;
      if (gen_.active() + t->spec.group_size() > active_limit_.limit() && gen_.active() > 0) {
        next_tenant_rr_ = i;
        return;
      }
      const uint64_t bound = uint64_t(t->spec.max_staleness() + 1) * t->spec.prompts_per_step();
      if (!args_.lockstep && in_flight_of(t) >= bound) continue;
      if (t->metrics.groups + t->open_groups >= needed_of(t)) continue;
      StartGroup(t);
      next_tenant_rr_ = (i + 1) % order.size();
      if (args_.lockstep) {
        --t->round_quota;
        // The trainer waits for what a round started (our cursor): publish it at once.
        (void)metrics_.StoreTenant(t->row, t->metrics);
      }
      if (!set_aside_.empty()) return;  // the group did not fit whole
      progress = true;
    }
  }
}

void Rollout::MarkUnservable(RolloutTenant* t, const std::string& why) {
  StageLog(kRole, "tenant %s: not served: %s", t->id.c_str(), why.c_str());
  t->unservable = why;
  t->finished = true;
  pipeline::SetTenantError(pipeline::TenantDir(args_.state_dir, t->id), kRole, "rollout: " + why,
                           &t->metrics);
  (void)metrics_.StoreTenant(t->row, t->metrics);
}

void Rollout::StartGroup(RolloutTenant* t) {
  auto g = std::make_unique<OpenGroup>();
  g->tenant = t;
  const uint64_t prompt_id = t->metrics.cursor++;
  const tasks::TaskExample example = t->source->Train(prompt_id);
  const uint64_t group_id = (uint64_t(incarnation_) << 32) | (next_group_++ & 0xffffffffu);
  pb::TrajectoryGroup& pg = g->group;
  pg.set_tenant(t->id);
  pg.set_tenant_generation(t->generation);
  pg.set_group_id(group_id);
  pg.set_prompt_id(prompt_id);
  pg.set_behaviour_version(t->version);
  const std::vector<int32_t> prompt = tok_.Encode(example.prompt);
  if (prompt.empty()) {  // nothing to generate from (TaskSource refuses empty prompts)
    MarkUnservable(t, "prompt " + std::to_string(prompt_id) + " (id '" + example.id +
                          "') encodes to no tokens");
    return;
  }
  // Past the positions the base was trained for, RoPE extrapolates: the answers would be
  // noise, trained on without a word.
  const size_t positions = prompt.size() + t->spec.sampling().max_new_tokens();
  const size_t max_positions = size_t(model_.config().max_position_embeddings);
  if (positions > max_positions) {
    MarkUnservable(t, "prompt " + std::to_string(prompt_id) + " (id '" + example.id + "') is " +
                          std::to_string(prompt.size()) + " tokens; with sampling.max_new_tokens " +
                          std::to_string(t->spec.sampling().max_new_tokens()) + " it needs " +
                          std::to_string(positions) + " positions, and the base model has " +
                          std::to_string(max_positions) + " (max_position_embeddings)");
    return;
  }
  t->metrics.prompt_tokens += prompt.size();
  const int group_size = int(t->spec.group_size());
  g->remaining = group_size;
  for (int i = 0; i < group_size; ++i) {
    pb::Trajectory* tr = pg.add_trajectories();
    tr->set_trajectory_id(group_id * 1024 + uint64_t(i));
    tr->set_tenant(t->id);
    tr->set_tenant_generation(t->generation);
    tr->set_group_id(group_id);
    tr->set_index_in_group(uint32_t(i));
    tr->set_prompt_id(prompt_id);
    tr->set_behaviour_version(t->version);
    tr->set_prompt_tokens(uint32_t(prompt.size()));
    auto s = std::make_unique<Sequence>();
    s->group = g.get();
    s->index = i;
    s->adapter = t->adapter;
    s->tokens = prompt;
    s->logprobs.assign(prompt.size(), 0.0f);
    s->mask.assign(prompt.size(), 0);
    s->prompt_tokens = uint32_t(prompt.size());
    s->seed = Mix(Mix(t->spec.sampling().seed(), group_id), uint64_t(i));
    s->traj = tr;
    s->id = next_seq_id_++;
    Sequence* raw = s.get();
    seqs_[s->id] = std::move(s);
    // Past the limit (memory ran short: ActiveLimit) the rest waits, set aside from the start.
    Enqueue(raw);
  }
  ++t->open_groups;
  t->start_order.push_back(group_id);
  groups_[group_id] = std::move(g);
}

void Rollout::Enqueue(Sequence* s) {
  if (gen_.active() < active_limit_.limit()) {
    AddToGenerator(s);
  } else {
    set_aside_.insert(s->id);
  }
}

bool Rollout::AddToGenerator(Sequence* s) {
  const RolloutTenant* t = s->group->tenant;
  model::GenerationRequest r;
  r.id = s->id;
  r.prompt = s->tokens;
  r.adapter = s->adapter;
  r.sampling.temperature = t->spec.sampling().temperature();
  r.sampling.top_p = t->spec.sampling().top_p();
  r.sampling.top_k = int32_t(t->spec.sampling().top_k());
  // Each time it goes back into the generator, a stream of its own.
  r.seed = s->tool_turns == 0 ? s->seed : Mix(s->seed, uint64_t(s->tool_turns));
  if (s->set_asides > 0) r.seed = Mix(r.seed, 0x5e7a5de000000000ULL + uint64_t(s->set_asides));
  r.max_new_tokens = std::max(1, int32_t(t->spec.sampling().max_new_tokens()) - s->generated);
  r.stop_tokens = stops_;
  try {
    gen_.Add(std::move(r));
  } catch (const std::exception& e) {
    if (!model::IsOutOfMemory(e)) throw;
    // Tried again at every pass while others generate: said at most once a second.
    const int64_t now = MonotonicNanos();
    if (now - add_failure_logged_ns_ >= 1'000'000'000) {
      StageLog(kRole, "tenant %s: no memory to place its adapter for a completion now: %s",
               t->id.c_str(), model::TorchErrorLine(e).c_str());
      add_failure_logged_ns_ = now;
    }
    set_aside_.insert(s->id);
    return false;
  }
  return true;
}

void Rollout::AppendGenerated(Sequence* s, const model::GenerationResult& r) {
  s->tokens.insert(s->tokens.end(), r.tokens.begin(), r.tokens.end());
  s->logprobs.insert(s->logprobs.end(), r.logprobs.begin(), r.logprobs.end());
  s->mask.insert(s->mask.end(), r.tokens.size(), 1);
  s->generated += int(r.tokens.size());
  s->group->tenant->metrics.tokens += r.tokens.size();
}

void Rollout::OnOutOfMemory(const std::string& what) {
  // First the sequences of tenants that are done (finished, stopped, failed or replaced): the
  // trainer would drop their groups.
  std::set<RolloutTenant*> done;
  for (const auto& [id, seq] : seqs_)
    if (seq->group->tenant->finished) done.insert(seq->group->tenant);
  if (!done.empty()) {
    for (RolloutTenant* t : done) DropTenantWork(t);
    StageLog(kRole,
             "out of memory in a pass (%s): dropped the sequences of %zu tenant(s) that are done",
             what.c_str(), done.size());
    return;
  }
  const size_t active = gen_.active();
  const size_t out = active_limit_.OutOfMemory(active);
  std::vector<uint64_t> ids = gen_.ActiveIds();
  if (out == 0) {
    auto it = ids.empty() ? seqs_.end() : seqs_.find(ids.front());
    if (it != seqs_.end()) OutOfMemoryAlone(it->second.get(), what);
    return;
  }
  // The newest go (the highest ids: the groups started last), so the oldest groups finish first.
  std::sort(ids.begin(), ids.end());
  for (size_t k = ids.size() - out; k < ids.size(); ++k) {
    std::optional<model::GenerationResult> part = gen_.Remove(ids[k]);
    auto it = seqs_.find(ids[k]);
    if (!part || it == seqs_.end()) continue;
    AppendGenerated(it->second.get(), *part);
    ++it->second->set_asides;
    set_aside_.insert(ids[k]);
  }
  StageLog(kRole,
           "out of memory in a pass of %zu sequences (%s): %zu set aside until memory allows; at "
           "most %zu at once for now",
           active, what.c_str(), out, active_limit_.limit());
}

void Rollout::OutOfMemoryAlone(Sequence* s, const std::string& what) {
  RolloutTenant* t = s->group->tenant;
  if (!active_limit_.GiveUpAlone()) {
    StageLog(kRole, "out of memory with one sequence (tenant %s: %s): trying it again",
             t->id.c_str(), what.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // memory may come back
    return;
  }
  if (!t->finished) {
    MarkUnservable(t, "out of memory generating one completion alone, " +
                          std::to_string(ActiveLimit::kAloneTries) + " times in a row (" +
                          std::to_string(s->tokens.size()) +
                          " tokens so far, sampling.max_new_tokens " +
                          std::to_string(t->spec.sampling().max_new_tokens()) + "): " + what);
  }
  DropTenantWork(t);  // `s` goes with it
  active_limit_.Reset();
}

void Rollout::ResumeSetAside() {
  while (!set_aside_.empty() && gen_.active() < active_limit_.limit()) {
    const uint64_t id = *set_aside_.begin();
    set_aside_.erase(set_aside_.begin());
    auto it = seqs_.find(id);
    if (it == seqs_.end() || AddToGenerator(it->second.get())) continue;
    // No memory to place it (set aside again). With nothing else generating, nothing would free
    // any: counted as a failure alone.
    if (gen_.active() == 0) {
      (void)active_limit_.OutOfMemory(1);
      OutOfMemoryAlone(it->second.get(), "placing its adapter");
    }
    return;
  }
}

void Rollout::DropTenantWork(RolloutTenant* t) {
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    if (it->second->group->tenant != t) {
      ++it;
      continue;
    }
    (void)gen_.Remove(it->first);
    set_aside_.erase(it->first);
    if (it->second->waiting_call != 0) parked_.erase(it->second->waiting_call);
    it = seqs_.erase(it);
  }
  for (auto it = groups_.begin(); it != groups_.end();) {
    if (it->second->tenant != t) {
      ++it;
      continue;
    }
    --t->open_groups;
    it = groups_.erase(it);
  }
  t->start_order.clear();
}

void Rollout::OnFinished(model::GenerationResult& r) {
  auto it = seqs_.find(r.id);
  if (it == seqs_.end()) return;
  Sequence* s = it->second.get();
  AppendGenerated(s, r);
  RolloutTenant* t = s->group->tenant;
  const int budget = int(t->spec.sampling().max_new_tokens());
  if (r.hit_stop && !r.tokens.empty() && r.tokens.back() == tool_end_ &&
      s->tool_turns < sandbox::kMaxToolTurns && s->generated < budget) {
    const std::string text =
        tok_.Decode(std::vector<int32_t>(s->tokens.begin() + s->prompt_tokens, s->tokens.end()));
    const auto last = sandbox::TrailingToolCall(text);
    if (last) {
      pb::ToolCall c;
      // Unique across restarts, as group ids are: a restarted rollout must not take a result the
      // verifier still returns for its predecessor's call of the same number.
      c.set_call_id((uint64_t(incarnation_) << 32) | (next_call_++ & 0xffffffffu));
      c.set_trajectory_id(s->traj->trajectory_id());
      c.set_tenant(t->id);
      c.set_tool(last->name);
      c.set_input(last->input);
      pb::ToolTurn* turn = s->traj->add_tool_turns();
      *turn->mutable_call() = c;
      std::string bytes;
      c.SerializeToString(&bytes);
      outbox_.emplace_back(pipeline::kToolCallRecord, std::move(bytes));
      outbox_groups_.emplace_back(nullptr, 0);
      std::vector<std::vector<int32_t>>& contexts = s->group->call_contexts;
      if (std::find(contexts.begin(), contexts.end(), s->tokens) != contexts.end()) {
        ++t->metrics.tool_calls_shared;
      } else {
        contexts.push_back(s->tokens);
      }
      s->waiting_call = c.call_id();
      s->parked_at = MonotonicNanos();
      parked_[c.call_id()] = r.id;
      return;
    }
  }
  FinishSequence(s);
  seqs_.erase(it);
}

void Rollout::FinishSequence(Sequence* s) {
  pb::Trajectory* tr = s->traj;
  for (int32_t tkn : s->tokens) tr->add_tokens(uint32_t(tkn));
  for (float lp : s->logprobs) tr->add_behaviour_logprobs(lp);
  tr->set_loss_mask(std::string(s->mask.begin(), s->mask.end()));
  tr->set_completion_text(
      tok_.Decode(std::vector<int32_t>(s->tokens.begin() + s->prompt_tokens, s->tokens.end())));
  OpenGroup* g = s->group;
  if (--g->remaining > 0) return;
  // Groups leave in the order they started, per tenant: the trainer then sees them in that order,
  // which is what makes count-based pacing bound the staleness.
  RolloutTenant* t = g->tenant;
  while (!t->start_order.empty()) {
    auto it = groups_.find(t->start_order.front());
    if (it != groups_.end() && it->second->remaining > 0) break;
    t->start_order.pop_front();
    if (it == groups_.end()) continue;
    if (pipeline::FitGroupToRing(&it->second->group, out_.max_record_bytes()))
      StageLog(kRole, "tenant %s: %s", t->id.c_str(), it->second->group.failure().c_str());
    std::string bytes;
    it->second->group.SerializeToString(&bytes);
    outbox_.emplace_back(pipeline::kGroupRecord, std::move(bytes));
    outbox_groups_.emplace_back(t, it->first);
    t->metrics.samples += uint64_t(it->second->group.trajectories_size());
    groups_.erase(it);
  }
}

void Rollout::DrainToolResults() {
  for (int i = 0; i < 256; ++i) {
    auto rec = tool_results_.Fetch(Deadline::Now());
    if (!rec.ok()) {
      if (rec.status().code() == StatusCode::kCorrupt) {
        std::string raw;
        (void)tool_results_.Quarantine(&raw);
        StageLog(kRole, "quarantined a corrupt tool result: %s", rec.status().message().c_str());
        continue;
      }
      return;
    }
    pb::ToolResult res;
    Status st = pipeline::ParseRecord(*rec, &res, pipeline::kToolRing);
    tool_results_.Ack(*rec);  // the result lives on in the sequence; a lost one times out
    if (!st.ok()) {
      StageLog(kRole, "quarantined: %s", st.ToString().c_str());
      continue;
    }
    auto p = parked_.find(res.call_id());
    if (p == parked_.end()) {
      StageLog(kRole,
               "ignored the result of tool call %llu: no completion waits for it (the call timed "
               "out, a rollout before a restart made it, or a restarted verifier answered it "
               "again)",
               (unsigned long long)res.call_id());
      continue;
    }
    auto it = seqs_.find(p->second);
    if (it != seqs_.end() && it->second->traj->trajectory_id() != res.trajectory_id()) {
      StageLog(kRole, "ignored a tool result for call %llu of trajectory %llu: that call is %llu's",
               (unsigned long long)res.call_id(), (unsigned long long)res.trajectory_id(),
               (unsigned long long)it->second->traj->trajectory_id());
      continue;
    }
    parked_.erase(p);
    if (it == seqs_.end()) continue;
    Sequence* s = it->second.get();
    s->waiting_call = 0;
    pb::ToolTurn* turn = s->traj->mutable_tool_turns(s->traj->tool_turns_size() - 1);
    *turn->mutable_result() = res;
    const std::vector<int32_t> result = tok_.Encode(sandbox::FormatToolResult(res.output()));
    turn->set_result_token_start(uint32_t(s->tokens.size()));
    turn->set_result_token_count(uint32_t(result.size()));
    s->tokens.insert(s->tokens.end(), result.begin(), result.end());
    s->logprobs.insert(s->logprobs.end(), result.size(), 0.0f);
    s->mask.insert(s->mask.end(), result.size(), 0);
    ++s->tool_turns;
    Enqueue(s);
  }
}

void Rollout::ExpireToolCalls() {
  const int64_t now = MonotonicNanos();
  for (auto p = parked_.begin(); p != parked_.end();) {
    auto it = seqs_.find(p->second);
    if (it == seqs_.end()) {
      ++p;
      continue;
    }
    Sequence* s = it->second.get();
    const uint32_t timeout_ms = s->group->tenant->spec.tool_result_timeout_ms();
    if (now - s->parked_at < int64_t(timeout_ms) * 1'000'000) {
      ++p;
      continue;
    }
    s->group->group.set_failure("tool call " + std::to_string(p->first) + " got no result within " +
                                std::to_string(timeout_ms) + " ms (tool_result_timeout_ms)");
    p = parked_.erase(p);
    FinishSequence(s);
    seqs_.erase(it);
  }
}

void Rollout::FlushOutputs() {
  while (!outbox_.empty()) {
    auto& [type, bytes] = outbox_.front();
    Status st = out_.Push(type, bytes.data(), bytes.size(), Deadline::AfterMs(5));
    if (!st.ok()) {
      if (st.code() == StatusCode::kInvalidArgument) {
        StageLog(kRole, "dropping an output record: %s", st.ToString().c_str());
      } else {
        return;  // ring full or verifier restarting: try again next round
      }
    }
    auto [tenant, group_id] = outbox_groups_.front();
    if (tenant != nullptr) {
      --tenant->open_groups;
      if (st.ok()) {
        // Counted at once: a restarted rollout paces itself from this count.
        ++tenant->metrics.groups;
        auto current = tenants_.find(tenant->row);  // a replaced tenant's row has new counters
        if (current != tenants_.end() && current->second.get() == tenant)
          (void)metrics_.StoreTenant(tenant->row, tenant->metrics);
        pipeline::AppendLine(pipeline::TenantDir(args_.state_dir, tenant->id) + "/produced.log",
                             std::to_string(group_id));
      }
    }
    outbox_.pop_front();
    outbox_groups_.pop_front();
  }
}

void Rollout::StoreMetrics() {
  for (auto& [row, t] : tenants_) (void)metrics_.StoreTenant(row, t->metrics);
  engine_.updated_mono_ns = MonotonicNanos();
  engine_.queue_depth = gen_.active();
  metrics_.StoreEngine(engine_);
}

Status Rollout::Run() {
  auto prev = metrics_.LoadEngine();
  engine_.started_mono_ns = MonotonicNanos();
  if (prev.ok() && prev->started_mono_ns != 0) engine_.restarts = prev->restarts + 1;
  if (prev.ok()) engine_.cost = prev->cost;  // the cost sums span restarts (shm/metrics.h)
  metrics_.StoreEngine(engine_);             // ready: serve's WaitUntilReady sees the start time
  int64_t last_sync = 0;
  int64_t last_pass_end = 0;   // a pass after a longer idle gap is cold (CostSums)
  uint64_t trainer_steps = 0;  // the trainer's step count at our last sync
  while (!pipeline::StopRequested()) {
    // After every pass during which the trainer stepped (a tenant's new adapter, its retired
    // groups: pacing lets new groups start only once we see them), else every 50 ms while
    // generating (admissions, drops); every 2 ms while idle. Idle, the loop comes round every
    // 0.5 ms (below), so a step is seen within that.
    const int64_t now = MonotonicNanos();
    auto trainer = trainer_metrics_.LoadEngine();
    const bool trainer_stepped = trainer.ok() && trainer->items != trainer_steps;
    if (trainer_stepped || now - last_sync >= (gen_.active() > 0 ? 50'000'000 : 2'000'000)) {
      if (trainer.ok()) trainer_steps = trainer->items;
      SyncTenants();
      if (!fatal_.ok()) return fatal_;
      ExpireToolCalls();
      StoreMetrics();
      last_sync = now;
    }
    DrainToolResults();
    ResumeSetAside();
    StartGroups();
    if (gen_.active() > 0) {
      const int64_t t0 = MonotonicNanos(), cpu0 = ProcessCpuNanos();
      std::vector<model::GenerationResult> done;
      try {
        done = gen_.Step();
      } catch (const std::exception& e) {
        // The generator advanced nothing and kept its caches as they were (model/generator.h).
        if (!model::IsOutOfMemory(e)) throw;
        engine_.busy_ns += uint64_t(MonotonicNanos() - t0);
        OnOutOfMemory(model::TorchErrorLine(e));
        continue;
      }
      active_limit_.GoodPass();
      const int64_t spent = MonotonicNanos() - t0, cpu = ProcessCpuNanos() - cpu0;
      engine_.busy_ns += uint64_t(spent);
      const model::StepShape& shape = gen_.last_step();
      // The fit takes the pass's CPU time: the simulator shares the cores itself.
      const bool cold = t0 - last_pass_end > CostSums::kColdAfterNs;
      last_pass_end = MonotonicNanos();
      engine_.cost.Add(double(shape.rows), double(shape.tokens), double(shape.adapters),
                       cold ? 1.0 : 0.0, double(cpu) * 1e-9);
      engine_.items += gen_.active() + done.size();
      for (auto& r : done) OnFinished(r);
    } else {
      // Idle with a tenant running means waiting for the trainer (pacing) or a tool result:
      // look again every 0.5 ms so that its step is seen soon; with none, every 2 ms.
      const bool waiting = std::any_of(tenants_.begin(), tenants_.end(),
                                       [](const auto& kv) { return !kv.second->finished; });
      // Idle for a while: the generator's key/value memory goes back (not between lockstep rounds).
      constexpr int64_t kReleaseIdleAfterNs = 5'000'000'000;
      if (now - last_pass_end > kReleaseIdleAfterNs) gen_.ReleaseIdleMemory();
      std::this_thread::sleep_for(std::chrono::microseconds(waiting ? 500 : 2000));
    }
    FlushOutputs();
  }
  StoreMetrics();
  return Status::Ok();
}

}  // namespace

Status RunRollout(const pipeline::StageArgs& args) {
  model::SetComputeThreads(args.threads);
  MARLAAS_ASSIGN_OR_RETURN(torch::Device device, model::ParseDevice(args.device));
  MARLAAS_ASSIGN_OR_RETURN(auto base, model::LoadBase(args.instance, args.model_dir, device,
                                                      Deadline::AfterMs(300'000)));
  // Checked against the model: an id past its vocabulary would fail only at the first forward.
  MARLAAS_ASSIGN_OR_RETURN(model::Tokenizer tok,
                           model::LoadModelTokenizer(args.model_dir, base->config));
  MARLAAS_ASSIGN_OR_RETURN(TenantTable table, TenantTable::Attach(args.instance));
  MARLAAS_ASSIGN_OR_RETURN(AdapterStore store, pipeline::AttachStageAdapterStore(args.instance));
  MARLAAS_ASSIGN_OR_RETURN(
      MetricsSegment metrics,
      MetricsSegment::Attach(args.instance, pipeline::RolloutName(args.replica)));
  MARLAAS_ASSIGN_OR_RETURN(MetricsSegment trainer_metrics,
                           MetricsSegment::Attach(args.instance, pipeline::kTrainerRole));
  MARLAAS_ASSIGN_OR_RETURN(
      RingProducer out,
      RingProducer::Attach({args.instance, pipeline::TrajRingName(args.replica)}));
  MARLAAS_ASSIGN_OR_RETURN(
      RingConsumer tool_results,
      RingConsumer::Attach({args.instance, pipeline::ToolRingName(args.replica)}));
  Rollout r(args, std::move(base), std::move(tok), std::move(table), std::move(store),
            std::move(metrics), std::move(trainer_metrics), std::move(out),
            std::move(tool_results));
  const int64_t warm0 = MonotonicNanos();
  if (args.adapter_broadcast) {
    // Without it every adapter still comes from the store.
    auto inbox = AdapterInbox::Start(
        args.instance, device.is_cuda() && device.has_index() ? int(device.index()) : 0);
    if (inbox.ok()) {
      r.SetInbox(std::move(*inbox));
    } else {
      StageLog(kRole, "no adapter broadcast: %s", inbox.status().ToString().c_str());
    }
  }
  MARLAAS_RETURN_IF_ERROR(r.WarmUp());
  StageLog(kRole, "ready (model %s on %s; warmed up in %.0f ms)", args.model_dir.c_str(),
           model::DeviceName(device).c_str(), double(MonotonicNanos() - warm0) / 1e6);
  return r.Run();
}

}  // namespace marlaas::rollout

#include "procs/serve/service.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>

#include "base/deadline.h"
#include "base/file_util.h"
#include "base/utf8.h"
#include "procs/common/checkpoint_files.h"
#include "procs/common/task_source.h"
#include "procs/common/tenant_error.h"
#include "procs/serve/admission.h"
#include "procs/serve/stage_gpus.h"
#include "procs/serve/state_dir_lock.h"
#include "procs/serve/tenant_status.h"
#include "proto/job_spec.h"
#include "sandbox/run_cgroup.h"
#include "sandbox/sandbox.h"
#include "shm/adapter_store.h"
#include "shm/broadcast_rendezvous.h"
#include "shm/ring_layout.h"
#include "shm/stale_segments.h"

namespace marlaas::serve {
namespace {

// The last 64 KiB of `path` ("" when it cannot be read).
std::string FileTail(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  f.seekg(std::max<std::streamoff>(0, size - 65536));
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// What the stage process `pid` said when it stopped (pipeline::StageMain logs "[role pid]
// stopped: <status>" as it exits with an error), else its last line, from the end of the stage's
// log (which earlier processes of the stage share); "" when it wrote nothing there. At most 400
// characters: the cause (a corrupt model file, a device this build cannot use) in the
// service's own error, not only in the log.
std::string LastStopReason(const std::string& log, const std::string& role, pid_t pid) {
  // The older part first (pipeline::SetStageLogFile): the stage's last lines may be the ones
  // that filled the log and went there with it.
  std::string tail = FileTail(pipeline::OlderStageLog(log));
  if (!tail.empty() && tail.back() != '\n') tail += '\n';
  tail += FileTail(log);
  const std::string tag = "[" + role + " " + std::to_string(pid) + "] ";
  std::string last, stopped;
  std::istringstream lines(tail);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find(tag);
    if (at == std::string::npos) continue;
    last = line.substr(at + tag.size());
    if (last.rfind("stopped: ", 0) == 0) stopped = last.substr(9);
  }
  std::string why = stopped.empty() ? last : stopped;
  if (why.size() > 400) why = why.substr(0, 397) + "...";
  return ValidUtf8(why);
}

namespace fs = std::filesystem;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string SelfDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

}  // namespace

struct Service::Held {
  std::vector<Segment> rings;
  std::optional<AdapterStore> store;
  std::optional<ShmRendezvous> rendezvous;  // with NCCL adapter broadcast
};

Result<std::unique_ptr<Service>> Service::Start(const ServiceOptions& options) {
  if (options.max_tenants < 1 || options.max_tenants > kMaxTenants) {
    return Status(StatusCode::kInvalidArgument,
                  "max tenants " + std::to_string(options.max_tenants) + " is out of range [1, " +
                      std::to_string(kMaxTenants) + "]");
  }
  if (options.stage.rollout_replicas < 1 ||
      options.stage.rollout_replicas > pipeline::kMaxRolloutReplicas) {
    return Status(StatusCode::kInvalidArgument,
                  "rollout replicas " + std::to_string(options.stage.rollout_replicas) +
                      " is out of range [1, " + std::to_string(pipeline::kMaxRolloutReplicas) +
                      "]");
  }
  std::unique_ptr<Service> s(new Service(options));
  if (s->options_.bin_dir.empty()) s->options_.bin_dir = SelfDir();
  const std::string& instance = options.stage.instance;
  std::error_code ec;
  // The tenants' files (jobs, steps, rewards, checkpoints) and the stages' logs are the service
  // user's only: other users of the host see a tenant through the socket, with its token (they
  // were 0755, each tenant's steps and job readable by anyone).
  for (const char* sub : {"/tenants", "/logs"}) {
    const std::string dir = options.stage.state_dir + sub;
    fs::create_directories(dir, ec);
    if (!ec) fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) return Status(StatusCode::kIo, "creating " + dir + ": " + ec.message());
  }
  // One service per state dir; the stages inherit the lock.
  MARLAAS_ASSIGN_OR_RETURN(s->lock_fd_, AcquireStateDirLock(options.stage.state_dir));
  // Segments left by dead services, of this instance and of any other (a serve's default
  // instance has its pid in it: each killed one left its segments, about 100 MiB of /dev/shm,
  // to `marlaas clean`), and what killed sandbox runs left.
  (void)RemoveStaleSegments();
  sandbox::RemoveStaleRunCgroups();
  (void)sandbox::RemoveStaleSandboxRoots();
  s->held_ = std::make_shared<Held>();
  MARLAAS_ASSIGN_OR_RETURN(TenantTable table, TenantTable::Create(instance));
  s->table_.emplace(std::move(table));
  s->segments_.push_back("tenants");
  AdapterStore::Options so;
  so.num_slots = options.max_tenants;
  if (options.stage.device != "cpu") {
    // On GPUs: device buffers handed over by CUDA IPC when the trainer and the rollout share
    // a GPU; host buffers (a device-to-host and a host-to-device copy) when they do not.
    MARLAAS_ASSIGN_OR_RETURN(bool shared_gpu,
                             TrainerAndRolloutShareGpus(options.stage.rollout_replicas));
    if (shared_gpu) so.backend = AdapterBackend::kCudaIpc;
  }
  MARLAAS_ASSIGN_OR_RETURN(AdapterStore store, AdapterStore::Create(instance, so));
  s->held_->store.emplace(std::move(store));
  s->segments_.push_back("adapters");
  const int replicas = options.stage.rollout_replicas;
  for (int r = 0; r < replicas; ++r)
    s->stages_.push_back(Stage{pipeline::kRolloutRole, pipeline::RolloutName(r), r});
  s->verifier_index_ = s->stages_.size();
  s->stages_.push_back(Stage{pipeline::kVerifierRole, pipeline::kVerifierRole});
  s->trainer_index_ = s->stages_.size();
  s->stages_.push_back(Stage{pipeline::kTrainerRole, pipeline::kTrainerRole});
  for (const Stage& st : s->stages_) {
    MARLAAS_ASSIGN_OR_RETURN(MetricsSegment m, MetricsSegment::Create(instance, st.name));
    s->metrics_.push_back(std::move(m));
    s->segments_.push_back("metrics." + st.name);
  }
  std::vector<std::string> rings = {pipeline::kScoredRing};
  for (int r = 0; r < replicas; ++r) {
    rings.push_back(pipeline::TrajRingName(r));
    rings.push_back(pipeline::ToolRingName(r));
  }
  for (const std::string& ring : rings) {
    MARLAAS_ASSIGN_OR_RETURN(Segment seg,
                             CreateRing({instance, ring}, pipeline::PipelineRingOptions()));
    s->held_->rings.push_back(std::move(seg));
    s->segments_.push_back(ring);
  }
  if (options.stage.device != "cpu") {
    // Replicas on other GPUs than the trainer's get adapters by NCCL broadcast, meeting in
    // segment "nccl"; the store still holds every adapter (host buffers then).
    MARLAAS_ASSIGN_OR_RETURN(std::vector<bool> off, ReplicasOffTrainerGpus(replicas));
    bool any = false;
    for (int r = 0; r < replicas; ++r) {
      s->stages_[size_t(r)].adapter_broadcast = off[size_t(r)];
      any = any || off[size_t(r)];
    }
    if (any) {
      MARLAAS_ASSIGN_OR_RETURN(ShmRendezvous rendezvous, ShmRendezvous::Create(instance));
      s->held_->rendezvous.emplace(std::move(rendezvous));
      s->segments_.push_back("nccl");
      s->stages_[s->trainer_index_].adapter_broadcast = true;
    }
  }
  for (Stage& st : s->stages_) MARLAAS_RETURN_IF_ERROR(s->Spawn(&st));
  return s;
}

Service::~Service() { Stop(); }

Status Service::Spawn(Stage* stage) {
  const std::string exe = options_.bin_dir + "/marlaas-" + stage->role;
  if (access(exe.c_str(), X_OK) != 0)
    return Status(StatusCode::kNotFound, exe + " is missing (build it: launch/marlaas --help)");
  pipeline::StageArgs args = options_.stage;
  args.replica = stage->replica;
  args.adapter_broadcast = stage->adapter_broadcast;
  const std::string log = options_.stage.state_dir + "/logs/" + stage->name + ".log";
  args.log_file = log;
  std::vector<std::string> argv = {exe};
  for (const std::string& a : pipeline::StageArgv(args)) argv.push_back(a);
  MARLAAS_ASSIGN_OR_RETURN(
      const std::optional<std::string> gpus,
      stage->role == pipeline::kRolloutRole
          ? ReplicaVisibleDevices(stage->replica, options_.stage.rollout_replicas)
          : StageVisibleDevices(stage->role));
  // Everything the child needs is built here: between fork and exec it makes only
  // async-signal-safe calls (no allocation, which could deadlock on a lock another thread of
  // this process held at the fork).
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::string> env;
  const std::string kGpus = "CUDA_VISIBLE_DEVICES=";
  for (char** e = environ; *e != nullptr; ++e) {
    if (gpus.has_value() && std::strncmp(*e, kGpus.c_str(), kGpus.size()) == 0) continue;
    env.emplace_back(*e);
  }
  if (gpus.has_value()) env.push_back(kGpus + *gpus);
  std::vector<char*> cenv;
  for (std::string& e : env) cenv.push_back(e.data());
  cenv.push_back(nullptr);
  const pid_t parent = getpid();
  const int64_t spawned = MonotonicNanos();
  const pid_t pid = fork();
  if (pid < 0) return ErrnoStatus("fork", errno);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    signal(SIGPIPE, SIG_DFL);  // serve ignores it (pipeline::InstallStopHandlers); stages do not
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execve(exe.c_str(), cargv.data(), cenv.data());
    _exit(127);
  }
  stage->pid = pid;
  stage->spawned_mono_ns = spawned;
  stage->stalled_ms = 0;
  stage->seen_update_ns = stage->seen_change_ns = 0;
  return Status::Ok();
}

bool Service::StagesReady() const {
  for (size_t i = 0; i < stages_.size(); ++i) {
    if (stages_[i].pid <= 0) return false;
    auto e = metrics_[i].LoadEngine();
    if (!e.ok() || e->started_mono_ns < stages_[i].spawned_mono_ns) return false;
  }
  return true;
}

Status Service::WaitUntilReady(int timeout_ms) {
  const int64_t deadline = MonotonicNanos() + int64_t(timeout_ms) * 1'000'000;
  for (;;) {
    Tick();
    if (!failure_.ok()) return failure_;
    if (StagesReady()) return Status::Ok();
    if (MonotonicNanos() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::string late;
  for (size_t i = 0; i < stages_.size(); ++i) {
    auto e = metrics_[i].LoadEngine();
    if (stages_[i].pid > 0 && e.ok() && e->started_mono_ns >= stages_[i].spawned_mono_ns) continue;
    late += (late.empty() ? "" : ", ") + stages_[i].name + " (restarted " +
            std::to_string(stages_[i].restarts) + " times)";
  }
  return Status(StatusCode::kTimeout, "stages not ready after " + std::to_string(timeout_ms) +
                                          " ms: " + late + "; see " + options_.stage.state_dir +
                                          "/logs");
}

Status Service::Admit(const pb::JobSpec& given) {
  return AdmitAs(given, TenantState::kRunning, false).status();
}

Status Service::AdmitTogether(const std::vector<pb::JobSpec>& given) {
  std::set<std::string> ids;
  std::vector<pb::JobSpec> checked;  // each checked once (a custom dataset is read once)
  for (const pb::JobSpec& g : given) {
    MARLAAS_ASSIGN_OR_RETURN(pb::JobSpec spec, CheckAdmissible(g, false));
    if (!ids.insert(spec.tenant()).second)
      return Status(StatusCode::kAlreadyExists,
                    "tenant '" + spec.tenant() + "' is in the list twice");
    checked.push_back(std::move(spec));
  }
  std::vector<int> held;
  Status st = Status::Ok();
  for (const pb::JobSpec& spec : checked) {
    Result<int> row = AdmitChecked(spec, TenantState::kAdmitted);
    if (!row.ok()) {
      st = row.status().Annotate("admitting tenant '" + spec.tenant() + "'");
      break;
    }
    held.push_back(*row);
  }
  for (int row : held) {
    MARLAAS_ASSIGN_OR_RETURN(TenantRecord r, table_->Get(row));
    r.state = TenantState::kRunning;
    MARLAAS_RETURN_IF_ERROR(table_->Put(row, r));
  }
  return st;
}

Result<pb::JobSpec> Service::CheckAdmissible(const pb::JobSpec& given, bool resuming) const {
  pb::JobSpec spec = given;
  ApplyJobSpecDefaults(&spec);
  MARLAAS_RETURN_IF_ERROR(ValidateJobSpec(spec));
  if (auto row = table_->Find(spec.tenant()); row.ok()) {
    // A settled tenant keeps its row until another needs it: it is not "admitted" any more.
    auto rec = table_->Get(*row);
    if (rec.ok() && IsSettled(rec->state)) {
      return Status(StatusCode::kAlreadyExists,
                    "tenant '" + spec.tenant() + "' already exists in this state dir (" +
                        std::string(TenantStateName(rec->state)) + "): give the job another id");
    }
    return Status(StatusCode::kAlreadyExists, "tenant '" + spec.tenant() + "' is already admitted");
  }
  // An id is used once per state dir: its checkpoints, logs and token stay with it.
  std::error_code ec;
  const std::string dir = pipeline::TenantDir(options_.stage.state_dir, spec.tenant());
  if (!resuming && fs::exists(dir + "/job.json", ec)) {
    return Status(StatusCode::kAlreadyExists, "tenant '" + spec.tenant() +
                                                  "' already exists in this state dir (" + dir +
                                                  "): give the job another id");
  }
  // A custom task's dataset is read now, not first by the stages: a missing or malformed file
  // is the submitter's error, named here.
  if (spec.task() == "custom") {
    // Relative, it would name a file beside wherever serve was started (the client makes a job
    // file's relative path absolute: only a raw request on the socket can send one).
    const std::string& path = spec.dataset().jsonl_path();
    if (path.empty() || path[0] != '/') {
      return Status(StatusCode::kInvalidArgument,
                    "job spec field 'dataset.jsonl_path': '" + path.substr(0, 80) +
                        "' must be an absolute path (marlaas submit makes a job file's relative "
                        "path absolute)");
    }
    MARLAAS_RETURN_IF_ERROR(pipeline::TaskSource::ForJob(spec).status().Annotate("dataset"));
  }
  MARLAAS_RETURN_IF_ERROR(CheckFitsBasePositions(spec, options_.stage.model_dir));
  return spec;
}

Result<int> Service::AdmitAs(const pb::JobSpec& given, TenantState state, bool resuming) {
  MARLAAS_ASSIGN_OR_RETURN(const pb::JobSpec spec, CheckAdmissible(given, resuming));
  return AdmitChecked(spec, state);
}

Result<int> Service::AdmitChecked(const pb::JobSpec& spec, TenantState state) {
  MARLAAS_ASSIGN_OR_RETURN(int row, PickRow());
  MARLAAS_ASSIGN_OR_RETURN(const uint64_t need,
                           EstimateTenantBytes(spec, options_.stage.model_dir));
  if (options_.memory_budget_bytes > 0) {
    uint64_t committed = 0;
    int live = 0;
    for (auto& [r, rec] : table_->Snapshot()) {
      if (IsSettled(rec.state)) continue;
      auto it = estimates_.find(rec.id);
      committed += it == estimates_.end() ? 0 : it->second;
      ++live;
    }
    if (committed + need > options_.memory_budget_bytes) {
      auto mib = [](uint64_t b) { return std::to_string((b + (1 << 20) - 1) >> 20); };
      return Status(StatusCode::kResourceExhausted,
                    "tenant '" + spec.tenant() + "' needs about " + mib(need) +
                        " MiB; the service's memory budget is " +
                        mib(options_.memory_budget_bytes) + " MiB and " + mib(committed) +
                        " MiB is committed to " + std::to_string(live) + " tenant(s)" +
                        (options_.memory_budget_source.empty()
                             ? ""
                             : " (budget: " + options_.memory_budget_source + ")"));
    }
  }
  // The slot's adapter buffers get their memory now: a /dev/shm without room refuses the tenant
  // by name, where the trainer's first write of its adapter died of SIGBUS.
  MARLAAS_RETURN_IF_ERROR(held_->store->ReserveSlot(row));
  // The row first, then job.json, then the table: a failure before the last leaves no job.json
  // behind (a later service would resume it, and its id would be taken).
  MARLAAS_ASSIGN_OR_RETURN(TenantRecord old, table_->Get(row));
  TenantRecord r{};
  MARLAAS_RETURN_IF_ERROR(CopyField(spec.tenant(), r.id, sizeof(r.id), "tenant id"));
  MARLAAS_RETURN_IF_ERROR(CopyField(spec.task(), r.task, sizeof(r.task), "task"));
  const std::string dir = pipeline::TenantDir(options_.stage.state_dir, spec.tenant());
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIo, "creating " + dir + ": " + ec.message());
  MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(dir + "/job.json", JobSpecToJson(spec)));
  r.state = state;
  r.adapter_slot = row;
  r.max_staleness = spec.max_staleness();
  r.group_size = spec.group_size();
  r.prompts_per_step = spec.prompts_per_step();
  r.max_steps = spec.max_steps();
  r.admitted_unix_ms = NowMs();
  r.generation = old.generation + 1;
  if (Status st = table_->Put(row, r); !st.ok()) {
    fs::remove(dir + "/job.json", ec);
    return st;
  }
  estimates_[spec.tenant()] = need;
  return row;
}

Result<int> Service::PickRow() const {
  int live = 0, free_row = -1, settled_row = -1;
  int64_t settled_at = 0;
  for (int row = 0; row < options_.max_tenants; ++row) {
    MARLAAS_ASSIGN_OR_RETURN(TenantRecord rec, table_->Get(row));
    if (rec.state == TenantState::kFree) {
      if (free_row < 0) free_row = row;
    } else if (!IsSettled(rec.state)) {
      ++live;
    } else if (settled_row < 0 || rec.settled_unix_ms < settled_at) {
      settled_row = row;  // the one settled longest ago keeps its row the shortest
      settled_at = rec.settled_unix_ms;
    }
  }
  if (live >= options_.max_tenants) {
    return Status(StatusCode::kResourceExhausted,
                  "the service holds at most " + std::to_string(options_.max_tenants) +
                      " tenants at a time (serve --max-tenants) and " + std::to_string(live) +
                      " are running; submit again when one finishes or is stopped");
  }
  return free_row >= 0 ? free_row : settled_row;
}

void Service::Settle(int row, TenantRecord rec, TenantState state, const std::string& reason) {
  const int64_t t0 = MonotonicNanos();
  rec.state = state;
  std::snprintf(rec.reason, sizeof(rec.reason), "%s", reason.c_str());
  rec.settled_unix_ms = NowMs();
  estimates_.erase(rec.id);
  // What `status` shows once the row is reused or the service restarts, then the final state,
  // which also tells a restarted service not to resume the tenant.
  TenantView v = ViewOf(row, rec);
  const std::string dir = pipeline::TenantDir(options_.stage.state_dir, rec.id);
  pb::TenantStatus status = TenantStatusOf(v);
  status.set_reason(ValidUtf8(reason));
  Status st = WriteSettledStatus(dir, status);
  if (state != TenantState::kFinished)
    settled_records_[rec.id] = {rec.generation, status.step(), reason};
  if (!st.ok()) std::fprintf(stderr, "[serve] tenant %s: %s\n", rec.id, st.ToString().c_str());
  // The state is written whatever became of status.json: without it a restarted service
  // resumes the tenant (a stopped one trained on). One that cannot be written now is tried
  // again at every tick (SaveUnsavedStates).
  std::string text = TenantStateName(state);
  if (!reason.empty()) text += ": " + reason;
  unsaved_states_[dir] = text + "\n";
  SaveUnsavedStates();
  st = table_->Put(row, rec);
  if (!st.ok()) std::fprintf(stderr, "[serve] tenant %s: %s\n", rec.id, st.ToString().c_str());
  ++settled_;
  settle_ns_ += uint64_t(MonotonicNanos() - t0);
}

void Service::SaveUnsavedStates() {
  for (auto it = unsaved_states_.begin(); it != unsaved_states_.end();) {
    const Status st = WriteFileAtomically(it->first + "/state", it->second);
    if (st.ok()) {
      it = unsaved_states_.erase(it);
      continue;
    }
    // Said once, and again when the service stops with it still unsaved.
    if (reported_unsaved_.insert(it->first).second)
      std::fprintf(stderr, "[serve] %s/state: %s (tried again while the service runs)\n",
                   it->first.c_str(), st.ToString().c_str());
    ++it;
  }
}

void Service::RefreshSettledStatus(int row, const TenantRecord& rec) {
  // Tick has dropped the records of tenants whose rows went to others: this one is rec's.
  auto it = settled_records_.find(rec.id);
  if (it == settled_records_.end()) return;
  TenantView v = ViewOf(row, rec);
  if (v.trainer.generation != rec.generation || v.trainer.steps <= it->second.step) return;
  pb::TenantStatus status = TenantStatusOf(v);
  status.set_reason(ValidUtf8(it->second.reason));
  const Status st =
      WriteSettledStatus(pipeline::TenantDir(options_.stage.state_dir, rec.id), status);
  if (!st.ok()) std::fprintf(stderr, "[serve] tenant %s: %s\n", rec.id, st.ToString().c_str());
  it->second.step = status.step();
}

Status Service::StopTenant(const std::string& tenant) {
  auto found = table_->Find(tenant);
  if (!found.ok()) {
    // Settled before this service, or its row went to another tenant: its state file says how.
    auto state = ReadFile(pipeline::TenantDir(options_.stage.state_dir, tenant) + "/state");
    if (state.ok()) {
      const std::string how = state->substr(0, state->find_first_of(":\n"));
      return Status(StatusCode::kFailedPrecondition, "tenant '" + tenant + "' is already " + how);
    }
    return found.status();
  }
  const int row = *found;
  MARLAAS_ASSIGN_OR_RETURN(TenantRecord rec, table_->Get(row));
  if (IsSettled(rec.state)) {
    return Status(StatusCode::kFailedPrecondition,
                  "tenant '" + tenant + "' is already " + TenantStateName(rec.state));
  }
  Settle(row, rec, TenantState::kStopped, "stopped by its owner");
  return Status::Ok();
}

void Service::Tick() {
  if (stopped_) return;
  SaveUnsavedStates();
  const int64_t now = NowMs();
  // A stage's end (an exit, a signal, or a failed start): counted, and once it has ended
  // kGiveUpAfterCrashes times in a row, the service's failure.
  auto ended = [&](Stage& st, const std::string& how) {
    const bool stalled = st.stalled_ms > 0;
    st.stalls_in_row = stalled ? st.stalls_in_row + 1 : 0;
    const bool give_up = ++st.crashes_in_row >= kGiveUpAfterCrashes ||
                         (stalled && st.stalls_in_row >= kGiveUpAfterStalls);
    std::fprintf(stderr, "[serve] %s: %s; %s\n", st.name.c_str(), how.c_str(),
                 give_up ? "giving up" : "restarting");
    const pid_t pid = st.pid;
    st.pid = 0;
    st.died_at = now;
    if (give_up && failure_.ok()) {
      const std::string log = options_.stage.state_dir + "/logs/" + st.name + ".log";
      const std::string why = LastStopReason(log, st.role, pid);
      const std::string times =
          stalled ? std::to_string(st.stalls_in_row) + " times in a row without progress"
                  : std::to_string(st.crashes_in_row) + " times in a row within 10 s of starting";
      failure_ = Status(StatusCode::kUnavailable,
                        st.name + " ended " + times + " (last: " + how + ")" +
                            (why.empty() ? "" : ", saying: " + why) + "; not restarting it: see " +
                            log + ". Unfinished tenants resume on the next start.");
    }
    if (give_up) st.crashes_in_row = std::max(st.crashes_in_row, kGiveUpAfterCrashes);  // down
  };
  // The watchdog measures quiet time on serve's own clock, from when it saw a stage's metrics
  // change; after a gap in serve's own ticks (it was paused or frozen with its stages) it starts
  // again, so that a stage that could not run meanwhile is not taken for hung.
  const int64_t tick_ns = MonotonicNanos();
  const bool serve_paused = last_tick_ns_ != 0 && tick_ns - last_tick_ns_ > 5'000'000'000;
  last_tick_ns_ = tick_ns;
  for (size_t i = 0; i < stages_.size(); ++i) {
    Stage& st = stages_[i];
    if (st.pid > 0 && st.stalled_ms == 0 && options_.stall_timeout_ms > 0) {
      // Alive but hung: its loop has stopped updating its metrics since it became ready.
      auto e = metrics_[i].LoadEngine();
      if (e.ok() && e->started_mono_ns >= st.spawned_mono_ns) {
        // (Its first store, at ready, may carry only the start time.)
        const int64_t update = std::max(e->started_mono_ns, e->updated_mono_ns);
        if (update != st.seen_update_ns || st.seen_change_ns == 0 || serve_paused) {
          st.seen_update_ns = update;
          st.seen_change_ns = tick_ns;
        }
        const int64_t quiet_ms = (tick_ns - st.seen_change_ns) / 1'000'000;
        if (quiet_ms > options_.stall_timeout_ms) {
          std::fprintf(stderr,
                       "[serve] %s: pid %d has not updated its metrics for %lld ms; killing it\n",
                       st.name.c_str(), int(st.pid), (long long)quiet_ms);
          st.stalled_ms = quiet_ms;
          kill(st.pid, SIGKILL);
        } else if (st.stalls_in_row > 0 &&
                   tick_ns - st.spawned_mono_ns > options_.stall_timeout_ms * 2'000'000) {
          st.stalls_in_row = 0;  // this process has run well past a timeout
        }
      }
    }
    if (st.pid > 0) {
      int status = 0;
      if (waitpid(st.pid, &status, WNOHANG) == st.pid) {
        ended(st, "pid " + std::to_string(st.pid) + " " +
                      (st.stalled_ms > 0 ? "was killed after " + std::to_string(st.stalled_ms) +
                                               " ms without progress (stall_timeout_ms)"
                       : WIFSIGNALED(status)
                           ? "was killed by signal " + std::to_string(WTERMSIG(status))
                           : "exited with " + std::to_string(WEXITSTATUS(status))));
      }
    }
    if (st.pid == 0 && st.crashes_in_row >= kGiveUpAfterCrashes) continue;
    if (st.pid == 0) {
      // Back off a crash loop: 0, 100, 200, ... ms, never more than 1 s.
      const int64_t delay = std::min<int64_t>(1000, 100 * (st.crashes_in_row - 1));
      if (now - st.died_at < delay) continue;
      Status s = Spawn(&st);
      if (!s.ok()) {
        ended(st, "could not be started: " + s.ToString());
        continue;
      }
      ++st.restarts;
    } else if (st.crashes_in_row > 0 && now - st.died_at > 10000) {
      st.crashes_in_row = 0;  // it has stayed up
    }
  }
  // Tenants the trainer has finished, and tenants whose verifier keeps failing, whom the
  // trainer could not start (e.g. unreadable checkpoints) or whom their rollout cannot serve (a
  // dataset gone since admission, a prompt that encodes to nothing).
  // The reason is the stage's last_error, whole when the stage left it in the tenant's dir.
  auto fail = [&](int row, const TenantRecord& rec, const char* role, const char* last_error) {
    const std::string reason = pipeline::FullTenantError(
        pipeline::TenantDir(options_.stage.state_dir, rec.id), role, last_error);
    std::fprintf(stderr, "[serve] tenant %s failed: %s\n", rec.id, reason.c_str());
    Settle(row, rec, TenantState::kFailed, reason);
  };
  const auto snapshot = table_->Snapshot();
  // Settled tenants whose rows went to others are done with (their status.json is final).
  for (auto it = settled_records_.begin(); it != settled_records_.end();) {
    const bool in_table = std::any_of(snapshot.begin(), snapshot.end(), [&](const auto& r) {
      return it->first == r.second.id && r.second.generation == it->second.generation;
    });
    it = in_table ? std::next(it) : settled_records_.erase(it);
  }
  for (auto& [row, rec] : snapshot) {
    if (IsSettled(rec.state)) RefreshSettledStatus(row, rec);
    if (rec.state != TenantState::kRunning) continue;
    auto vm = metrics_[verifier_index_].LoadTenant(row);
    auto tm = metrics_[trainer_index_].LoadTenant(row);
    const bool v_ok = vm.ok() && vm->generation == rec.generation;
    const bool t_ok = tm.ok() && tm->generation == rec.generation;
    auto rm =
        metrics_[size_t(pipeline::ReplicaOfRow(row, options_.stage.rollout_replicas))].LoadTenant(
            row);
    const bool r_ok = rm.ok() && rm->generation == rec.generation;
    if (v_ok && vm->verifier_errors >= kFailAfterVerifierErrors &&
        vm->verifier_errors > 2 * vm->groups) {
      fail(row, rec, "verifier", vm->last_error);
    } else if (t_ok && tm->steps == 0 && tm->last_error[0]) {
      fail(row, rec, "trainer", tm->last_error);
    } else if (t_ok && tm->steps >= rec.max_steps && tm->checkpointed_steps >= rec.max_steps) {
      // Finished once its last step is saved too: until then (a full disk) it stays running,
      // its reason the failed save's, and a restart resumes from what was saved.
      Settle(row, rec, TenantState::kFinished, "");
    } else if (r_ok && rm->last_error[0]) {
      fail(row, rec, "rollout", rm->last_error);
    }
  }
}

bool Service::AllDone() const {
  for (auto& [row, rec] : table_->Snapshot())
    if (!IsSettled(rec.state)) return false;
  return true;
}

TenantView Service::ViewOf(int row, const TenantRecord& rec) const {
  TenantView v;
  v.row = row;
  v.record = rec;
  const size_t replica = size_t(pipeline::ReplicaOfRow(row, options_.stage.rollout_replicas));
  const std::pair<size_t, TenantMetrics*> from[] = {
      {replica, &v.rollout}, {verifier_index_, &v.verifier}, {trainer_index_, &v.trainer}};
  for (const auto& [index, dst] : from) {
    auto m = metrics_[index].LoadTenant(row);
    if (m.ok() && m->generation == rec.generation) *dst = *m;
  }
  return v;
}

std::vector<TenantView> Service::Tenants() const {
  std::vector<TenantView> out;
  for (auto& [row, rec] : table_->Snapshot()) out.push_back(ViewOf(row, rec));
  return out;
}

std::vector<StageView> Service::Stages() const {
  std::vector<StageView> out;
  for (size_t i = 0; i < stages_.size(); ++i) {
    StageView v;
    v.role = stages_[i].role;
    v.name = stages_[i].name;
    v.pid = stages_[i].pid;
    v.restarts = stages_[i].restarts;
    auto e = metrics_[i].LoadEngine();
    if (e.ok()) v.engine = *e;
    out.push_back(v);
  }
  return out;
}

pid_t Service::StagePid(const std::string& name) const {
  for (const Stage& s : stages_)
    if (s.name == name) return s.pid;
  return 0;
}

void Service::Stop(int grace_ms) {
  if (stopped_) return;
  stopped_ = true;
  MarkStateDirLockStopping(lock_fd_);  // a serve started now waits for us instead of refusing
  for (Stage& s : stages_)
    if (s.pid > 0) kill(s.pid, SIGTERM);
  const int64_t until = NowMs() + grace_ms;
  for (Stage& s : stages_) {
    while (s.pid > 0) {
      if (waitpid(s.pid, nullptr, WNOHANG) == s.pid) {
        s.pid = 0;
      } else if (NowMs() >= until) {
        kill(s.pid, SIGKILL);
        waitpid(s.pid, nullptr, 0);
        s.pid = 0;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }
  for (const std::string& name : segments_) (void)Segment::Remove({options_.stage.instance, name});
  SaveUnsavedStates();
  for (const auto& [dir, text] : unsaved_states_)
    std::fprintf(stderr,
                 "[serve] %s/state could not be written (%s): the next service resumes that "
                 "tenant\n",
                 dir.c_str(), text.substr(0, text.size() - 1).c_str());
  if (lock_fd_ >= 0) close(lock_fd_);
  lock_fd_ = -1;
}

Result<std::vector<std::string>> Service::ResumeTenants() {
  std::vector<std::string> resumed;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.stage.state_dir + "/tenants", ec)) {
    const std::string dir = entry.path().string(), id = entry.path().filename().string();
    if (fs::exists(dir + "/state")) continue;
    if (!fs::exists(dir + "/job.json")) {
      // A refused admission may leave a folder without one; a tenant that trained has
      // checkpoints, which are not lost silently.
      if (fs::exists(dir + "/checkpoints")) {
        std::fprintf(stderr,
                     "[serve] tenant %s not resumed: %s/job.json is missing (its checkpoints "
                     "stay on disk)\n",
                     id.c_str(), dir.c_str());
      }
      continue;
    }
    if (table_->Find(id).ok()) continue;
    auto job = LoadJobSpecFile(dir + "/job.json");
    if (!job.ok()) {
      std::fprintf(stderr, "[serve] tenant %s not resumed: %s\n", id.c_str(),
                   job.status().ToString().c_str());
      continue;
    }
    // One that does not fit (fewer rows or a smaller memory budget than before) waits on disk
    // for a later service; the others resume.
    Status st = AdmitAs(*job, TenantState::kRunning, true).status();
    if (st.code() == StatusCode::kResourceExhausted) {
      std::fprintf(stderr, "[serve] tenant %s not resumed now (it stays on disk): %s\n", id.c_str(),
                   st.ToString().c_str());
      continue;
    }
    if (!st.ok()) {  // it never will be (e.g. its dataset is gone): failed, with the reason
      std::fprintf(stderr, "[serve] tenant %s failed: not resumed: %s\n", id.c_str(),
                   st.ToString().c_str());
      (void)WriteFileAtomically(dir + "/state", "failed: not resumed: " + st.ToString() + "\n");
      continue;
    }
    // Which checkpoint the trainer resumes from is its to decide (it falls back past damaged
    // ones and logs why); what is on disk now says whether there is one at all.
    auto latest = pipeline::LatestCheckpointDir(dir);
    if (latest.ok()) {
      std::fprintf(stderr, "[serve] resumed tenant %s from its checkpoint %s\n", id.c_str(),
                   fs::path(*latest).filename().c_str());
    } else {
      std::fprintf(stderr, "[serve] resumed tenant %s from step 0: it has no checkpoint (%s)\n",
                   id.c_str(), latest.status().message().c_str());
    }
    resumed.push_back(id);
  }
  if (ec) return Status(StatusCode::kIo, "listing tenants: " + ec.message());
  return resumed;
}

}  // namespace marlaas::serve

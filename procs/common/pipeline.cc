#include "procs/common/pipeline.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>

#include "base/device_name.h"
#include "base/file_util.h"
#include "base/heap.h"
#include "proto/job_spec.h"

namespace marlaas::pipeline {
namespace {

std::atomic<bool> g_stop{false};

void OnStopSignal(int) { g_stop.store(true); }

bool ParseIntIn(const std::string& s, long lo, long hi, int* out) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi) return false;
  *out = int(v);
  return true;
}

}  // namespace

RingOptions PipelineRingOptions() {
  RingOptions o;
  o.capacity_bytes = 32u << 20;
  o.max_record_bytes = 4u << 20;
  return o;
}

namespace {
std::string WithReplica(const char* name, int replica) {
  return replica == 0 ? std::string(name) : std::string(name) + "." + std::to_string(replica);
}
}  // namespace

std::string TrajRingName(int replica) { return WithReplica(kTrajRing, replica); }
std::string ToolRingName(int replica) { return WithReplica(kToolRing, replica); }
std::string RolloutName(int replica) { return WithReplica(kRolloutRole, replica); }

Result<StageArgs> ParseStageArgs(const std::vector<std::string>& argv) {
  StageArgs a;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& f = argv[i];
    auto value = [&](std::string* out) -> Status {
      if (i + 1 >= argv.size()) return Status(StatusCode::kInvalidArgument, f + " needs a value");
      *out = argv[++i];
      return Status::Ok();
    };
    std::string v;
    if (f == "--instance") {
      MARLAAS_RETURN_IF_ERROR(value(&a.instance));
    } else if (f == "--state-dir") {
      MARLAAS_RETURN_IF_ERROR(value(&a.state_dir));
    } else if (f == "--model-dir") {
      MARLAAS_RETURN_IF_ERROR(value(&a.model_dir));
    } else if (f == "--threads") {
      MARLAAS_RETURN_IF_ERROR(value(&v));
      if (!ParseIntIn(v, 1, 1024, &a.threads))
        return Status(StatusCode::kInvalidArgument, "--threads takes a whole number >= 1");
    } else if (f == "--verifier-workers") {
      MARLAAS_RETURN_IF_ERROR(value(&v));
      if (!ParseIntIn(v, 1, 1024, &a.verifier_workers))
        return Status(StatusCode::kInvalidArgument, "--verifier-workers takes a number >= 1");
    } else if (f == "--prepared-sandboxes") {
      MARLAAS_RETURN_IF_ERROR(value(&v));
      if (!ParseIntIn(v, 0, 64, &a.prepared_sandboxes))
        return Status(StatusCode::kInvalidArgument, "--prepared-sandboxes takes 0 to 64");
    } else if (f == "--allow-weak-sandbox") {
      a.allow_weak_sandbox = true;
    } else if (f == "--adapter-broadcast") {
      a.adapter_broadcast = true;
    } else if (f == "--lockstep") {
      a.lockstep = true;
    } else if (f == "--env-latency-ms") {
      MARLAAS_RETURN_IF_ERROR(value(&v));
      if (!ParseIntIn(v, 0, 600000, &a.env_latency_ms))
        return Status(StatusCode::kInvalidArgument, "--env-latency-ms takes 0 to 600000");
    } else if (f == "--log-file") {
      MARLAAS_RETURN_IF_ERROR(value(&a.log_file));
    } else if (f == "--device") {
      MARLAAS_RETURN_IF_ERROR(value(&a.device));
      MARLAAS_RETURN_IF_ERROR(ParseDeviceName(a.device).status());
    } else if (f == "--rollout-replicas") {
      MARLAAS_RETURN_IF_ERROR(value(&v));
      if (!ParseIntIn(v, 1, kMaxRolloutReplicas, &a.rollout_replicas))
        return Status(StatusCode::kInvalidArgument,
                      "--rollout-replicas takes 1 to " + std::to_string(kMaxRolloutReplicas));
    } else if (f == "--replica") {
      MARLAAS_RETURN_IF_ERROR(value(&v));
      if (!ParseIntIn(v, 0, kMaxRolloutReplicas - 1, &a.replica))
        return Status(StatusCode::kInvalidArgument,
                      "--replica takes 0 to " + std::to_string(kMaxRolloutReplicas - 1));
    } else {
      return Status(StatusCode::kInvalidArgument, "unexpected argument '" + f + "'");
    }
  }
  if (a.instance.empty() || a.state_dir.empty() || a.model_dir.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "every stage needs --instance, --state-dir and --model-dir");
  }
  if (a.replica >= a.rollout_replicas) {
    return Status(StatusCode::kInvalidArgument, "--replica " + std::to_string(a.replica) +
                                                    " is not below --rollout-replicas " +
                                                    std::to_string(a.rollout_replicas));
  }
  return a;
}

std::vector<std::string> StageArgv(const StageArgs& a) {
  std::vector<std::string> v = {"--instance",
                                a.instance,
                                "--state-dir",
                                a.state_dir,
                                "--model-dir",
                                a.model_dir,
                                "--threads",
                                std::to_string(a.threads),
                                "--verifier-workers",
                                std::to_string(a.verifier_workers),
                                "--prepared-sandboxes",
                                std::to_string(a.prepared_sandboxes)};
  if (a.allow_weak_sandbox) v.push_back("--allow-weak-sandbox");
  if (a.lockstep) v.push_back("--lockstep");
  if (a.env_latency_ms > 0) {
    v.push_back("--env-latency-ms");
    v.push_back(std::to_string(a.env_latency_ms));
  }
  if (a.device != "cpu") {
    v.push_back("--device");
    v.push_back(a.device);
  }
  if (a.rollout_replicas > 1) {
    v.push_back("--rollout-replicas");
    v.push_back(std::to_string(a.rollout_replicas));
  }
  if (a.replica > 0) {
    v.push_back("--replica");
    v.push_back(std::to_string(a.replica));
  }
  if (a.adapter_broadcast) v.push_back("--adapter-broadcast");
  if (!a.log_file.empty()) {
    v.push_back("--log-file");
    v.push_back(a.log_file);
  }
  return v;
}

std::string TenantDir(const std::string& state_dir, const std::string& tenant) {
  return state_dir + "/tenants/" + tenant;
}

Result<pb::JobSpec> LoadTenantJob(const std::string& state_dir, const std::string& tenant) {
  return LoadJobSpecFile(TenantDir(state_dir, tenant) + "/job.json");
}

namespace {

// Writes all of `text` at the end of `path`; after a failed write the file may end in a torn
// line, which `text` then starts after (a line of its own, left out by the readers).
Status AppendText(const std::string& path, std::string text, bool after_failure) {
  // Read and write: after a failure its last byte is read (pread needs a readable descriptor).
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("opening " + path, errno);
  struct stat st {};
  char last = '\n';
  if (after_failure && ::fstat(fd, &st) == 0 && st.st_size > 0 &&
      ::pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n')
    text.insert(text.begin(), '\n');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      return ErrnoStatus("appending to " + path, err);
    }
    done += size_t(n);
  }
  return ::close(fd) == 0 ? Status::Ok() : ErrnoStatus("closing " + path, errno);
}

}  // namespace

void AppendLine(const std::string& path, const std::string& line) {
  struct Held {
    std::string text;  // whole lines not written yet
    uint64_t dropped = 0;
  };
  static std::mutex mu;
  static std::map<std::string, Held> held;
  std::lock_guard<std::mutex> lock(mu);
  auto it = held.find(path);
  const bool after_failure = it != held.end();
  std::string text = after_failure ? it->second.text + line + "\n" : line + "\n";
  const Status st = AppendText(path, text, after_failure);
  if (st.ok()) {
    if (after_failure) {
      std::fprintf(stderr, "marlaas: %s: the held lines are written%s\n", path.c_str(),
                   it->second.dropped > 0 ? (", but " + std::to_string(it->second.dropped) +
                                             " older ones were dropped (more than the memory held)")
                                                .c_str()
                                          : "");
      held.erase(it);
    }
    return;
  }
  if (!after_failure) {
    std::fprintf(stderr, "marlaas: %s (its lines are held and written once it can be)\n",
                 st.ToString().c_str());
    it = held.emplace(path, Held{}).first;
  }
  while (text.size() > kHeldLogBytes) {  // the oldest lines go first
    const size_t eol = text.find('\n');
    text.erase(0, eol == std::string::npos ? text.size() : eol + 1);
    ++it->second.dropped;
  }
  it->second.text = std::move(text);
}

Status PushMessage(RingProducer* ring, uint32_t type, const google::protobuf::MessageLite& msg,
                   Deadline deadline) {
  const size_t bytes = msg.ByteSizeLong();
  MARLAAS_ASSIGN_OR_RETURN(unsigned char* dst, ring->Reserve(bytes, deadline));
  if (!msg.SerializeWithCachedSizesToArray(dst)) {
    return Status(StatusCode::kInternal, "serialising a record for " + ring->ring_name());
  }
  return ring->Commit(type);
}

bool FitGroupToRing(pb::TrajectoryGroup* group, uint32_t max_record_bytes) {
  const size_t bytes = group->ByteSizeLong();
  if (bytes <= max_record_bytes) return false;
  group->clear_trajectories();
  group->set_failure(
      "the group (" + std::to_string(bytes) + " bytes) exceeds the ring's largest record (" +
      std::to_string(max_record_bytes) + " bytes): lower group_size or sampling.max_new_tokens");
  return true;
}

Status ParseRecord(const RecordView& record, google::protobuf::MessageLite* msg,
                   const std::string& ring) {
  if (!msg->ParseFromArray(record.data, int(record.size))) {
    return Status(StatusCode::kCorrupt, "record " + std::to_string(record.seq) + " of " + ring +
                                            " (type " + std::to_string(record.type) +
                                            ") is not a valid " + msg->GetTypeName());
  }
  return Status::Ok();
}

void InstallStopHandlers(bool stop_with_parent) {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  if (!stop_with_parent) {
    // serve and bench: a closed stdout (`marlaas serve | head`) makes a write fail with EPIPE
    // instead of killing the process before it removes its segments. (The stages serve spawns
    // get SIGPIPE back at their exec: an ignored signal would pass on to sandboxed programs.)
    signal(SIGPIPE, SIG_IGN);
    // Nor does a hangup (the terminal or ssh session that started it closed) stop it: it goes
    // on, and its stages with it (the ignored SIGHUP passes through their exec).
    signal(SIGHUP, SIG_IGN);
    return;
  }
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) g_stop.store(true);  // the supervisor is already gone
}

bool StopRequested() { return g_stop.load(std::memory_order_relaxed); }
void RequestStop() { g_stop.store(true); }

namespace {

std::mutex g_log_mu;
std::string g_log_path;  // guarded by g_log_mu
uint64_t g_log_max_bytes = 0;
std::atomic<bool> g_log_set{false};

// Past its size, the log on stderr becomes its older part and a new one takes its place on
// stdout and stderr; the writes before this are in the older part, those after in the new one.
void RotateStageLog() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  struct stat on_fd {
  }, on_disk{};
  if (::fstat(STDERR_FILENO, &on_fd) != 0 || !S_ISREG(on_fd.st_mode) ||
      uint64_t(on_fd.st_size) < g_log_max_bytes)
    return;
  if (::stat(g_log_path.c_str(), &on_disk) != 0 || on_disk.st_dev != on_fd.st_dev ||
      on_disk.st_ino != on_fd.st_ino)
    return;  // stderr is not the log (any more): leave both alone
  const std::string older = OlderStageLog(g_log_path);
  std::fflush(stdout);
  if (::rename(g_log_path.c_str(), older.c_str()) != 0) {
    const int err = errno;
    g_log_max_bytes = UINT64_MAX;  // said once, not at every line
    std::fprintf(stderr, "marlaas: rotating %s to %s: %s; it grows on\n", g_log_path.c_str(),
                 older.c_str(), std::strerror(err));
    return;
  }
  const int fd = ::open(g_log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    g_log_max_bytes = UINT64_MAX;
    std::fprintf(stderr, "marlaas: opening %s: %s; the log goes on in %s\n", g_log_path.c_str(),
                 std::strerror(err), older.c_str());
    return;
  }
  ::dup2(fd, STDOUT_FILENO);
  ::dup2(fd, STDERR_FILENO);
  ::close(fd);
  std::fprintf(stderr, "marlaas: the log before this line is in %s\n", older.c_str());
}

}  // namespace

std::string OlderStageLog(const std::string& path) { return path + ".1"; }

void SetStageLogFile(const std::string& path, uint64_t max_bytes) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log_path = path;
  g_log_max_bytes = max_bytes;
  g_log_set.store(!path.empty());
}

void StageLog(const char* role, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm local{};
  localtime_r(&ts.tv_sec, &local);
  std::fprintf(stderr, "%02d:%02d:%02d.%03d [%s %d] %s\n", local.tm_hour, local.tm_min,
               local.tm_sec, int(ts.tv_nsec / 1'000'000), role, int(getpid()), buf);
  if (g_log_set.load(std::memory_order_relaxed)) RotateStageLog();
}

}  // namespace marlaas::pipeline

#include "shm/adapter_layout.h"

namespace marlaas::pipeline {

Result<uint32_t> TargetMaskOf(const pb::JobSpec& spec) {
  if (spec.lora().targets().empty()) return (1u << kNumLoraTargets) - 1;
  uint32_t mask = 0;
  for (const std::string& name : spec.lora().targets()) {
    bool found = false;
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (name == LoraTargetName(LoraTarget(t))) {
        mask |= 1u << t;
        found = true;
      }
    }
    if (!found) return Status(StatusCode::kInvalidArgument, "unknown LoRA target '" + name + "'");
  }
  return mask;
}

}  // namespace marlaas::pipeline

namespace marlaas::pipeline {

int StageMain(int argc, char** argv, const char* role, Status (*run)(const StageArgs&)) {
  auto args = ParseStageArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (!args.ok()) {
    std::fprintf(stderr, "marlaas-%s: %s\n", role, args.status().ToString().c_str());
    return 2;
  }
  InstallStopHandlers();
  if (!args->log_file.empty()) SetStageLogFile(args->log_file);
  // Each pass and step allocates what the previous one freed: keep it rather than fault it in
  // again (base/heap.h). Only speed depends on it.
  if (Status heap = KeepFreedHeapMemory(); !heap.ok())
    StageLog(role, "allocator settings: %s", heap.ToString().c_str());
  // An exception that reached here (LibTorch's allocator out of memory: c10::Error) ended the
  // stage with std::terminate's untagged text, and serve's reason quoted an older line ("ready"):
  // said as the stage's stop reason instead, its first line (c10's have a backtrace after it).
  Status st = Status::Ok();
  try {
    st = run(*args);
  } catch (const std::bad_alloc&) {
    st = Status(StatusCode::kResourceExhausted, "out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    st = Status(StatusCode::kInternal, "uncaught exception: " + what.substr(0, 600));
  }
  if (!st.ok()) {
    StageLog(role, "stopped: %s", st.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace marlaas::pipeline

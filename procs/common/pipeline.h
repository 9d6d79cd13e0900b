// What the stage processes (rollout, verifier, trainer) and their supervisor (serve) agree on:
// ring names and record types, the command line every stage takes, where a tenant's files live
// in the state dir, and small helpers to move protobuf messages through rings. Pure wiring; any
// thread unless a function says otherwise.
#pragma once

#include <google/protobuf/message_lite.h>

#include <string>
#include <vector>

#include "base/deadline.h"
#include "base/status.h"
#include "proto/marlaas.pb.h"
#include "shm/ring_consumer.h"
#include "shm/ring_layout.h"
#include "shm/ring_producer.h"

namespace marlaas::pipeline {

// Record types on the rings.
enum RecordType : uint32_t {
  kGroupRecord = 1,       // pb::TrajectoryGroup
  kToolCallRecord = 2,    // pb::ToolCall
  kToolResultRecord = 3,  // pb::ToolResult
};

// Ring segment names (under the service instance) and sizes.
inline constexpr char kTrajRing[] = "ring.traj";      // rollout -> verifier: groups, tool calls
inline constexpr char kToolRing[] = "ring.tools";     // verifier -> rollout: tool results
inline constexpr char kScoredRing[] = "ring.scored";  // verifier -> trainer: scored groups
RingOptions PipelineRingOptions();

// Rollout replicas (DESIGN.md §2: one ring pair per rollout process). Replica 0 uses the names
// above; replica r > 0 appends ".r" ("ring.traj.1", "ring.tools.1", metrics "rollout.1"). The
// tenant of table row `row` is served by replica row % replicas: fixed for the row's life, so a
// restarted replica, the verifier and the trainer agree on it without asking anyone.
inline constexpr int kMaxRolloutReplicas = 16;
std::string TrajRingName(int replica);
std::string ToolRingName(int replica);
std::string RolloutName(int replica);  // the replica's metrics role and log name
inline int ReplicaOfRow(int row, int replicas) { return replicas <= 1 ? 0 : row % replicas; }

// Metrics segment roles.
inline constexpr char kRolloutRole[] = "rollout";
inline constexpr char kVerifierRole[] = "verifier";
inline constexpr char kTrainerRole[] = "trainer";

// The command line of every stage process:
//   --instance ID --state-dir DIR --model-dir DIR [--threads N] [--verifier-workers N]
//   [--prepared-sandboxes N] [--allow-weak-sandbox] [--device cpu|cuda|cuda:N]
//   [--rollout-replicas N] [--replica R] [--adapter-broadcast]
struct StageArgs {
  std::string instance;
  std::string state_dir;
  std::string model_dir;
  int threads = 1;
  int verifier_workers = 2;
  // Sandboxes the verifier keeps prepared ahead (sandbox/sandbox_pool.h). Measured with
  // bench_sandbox: one takes ~1 ms off a python-tests run's p50 and halves its p99, for up to ~14%
  // fewer runs/s when every core is busy verifying; tool calls, which a rollout waits for, gain
  // most.
  int prepared_sandboxes = 1;
  bool allow_weak_sandbox = false;
  // The synchronous baselines of `marlaas bench pipeline` (DESIGN.md §7): the rollout samples in
  // rounds (each unfinished tenant's next step, all of them, then nothing until every group of
  // the round is trained) and the trainer steps only when every unfinished tenant has its batch,
  // so generation and training never overlap. Off in the service.
  bool lockstep = false;
  // Modelled remote tools and environments: the verifier returns each result (a scored group or
  // a tool result) this much later, drawn from a lognormal with this median (sigma 0.5), without
  // holding a worker meanwhile. 0: off.
  int env_latency_ms = 0;
  // Where the rollout and the trainer run the model (model/device.h): "cpu", "cuda" (the first
  // GPU the stage sees: CUDA_VISIBLE_DEVICES, procs/serve/stage_gpus.h) or "cuda:N".
  std::string device = "cpu";
  // Rollout processes in the service (every stage knows: the verifier reads each one's ring, the
  // trainer each one's prompt cursors) and which of them this one is (rollout only; 0 elsewhere).
  int rollout_replicas = 1;
  int replica = 0;
  // NCCL adapter broadcast (serve sets it when a rollout replica is on a GPU other than the
  // trainer's): the trainer sends every published adapter (procs/trainer/adapter_fanout.h), a
  // replica on another GPU receives them (procs/rollout/adapter_inbox.h).
  bool adapter_broadcast = false;
  // The file serve sent the stage's stdout and stderr to (<state>/logs/<stage>.log): the stage
  // keeps it from growing without end (SetStageLogFile). Empty: not rotated (run by hand).
  std::string log_file;
};
Result<StageArgs> ParseStageArgs(const std::vector<std::string>& argv);
std::vector<std::string> StageArgv(const StageArgs& args);

// <state_dir>/tenants/<tenant>: job.json (written by serve), checkpoints/, trainer.log,
// produced.log, steps.jsonl.
std::string TenantDir(const std::string& state_dir, const std::string& tenant);
Result<pb::JobSpec> LoadTenantJob(const std::string& state_dir, const std::string& tenant);

// Appends one line (a newline is added) to `path`. A line that cannot be written (a full or
// read-only disk, a folder in the way) is held in memory, in order, and written before the next
// line that can be: a log keeps every line, in order, across a passing fault (steps.jsonl had
// lasting gaps). The first failure for a path is said on stderr with its reason, and so is the
// write that catches up. At most kHeldLogBytes are held per path; older held lines beyond that
// are dropped and counted in the catch-up message. Thread-safe.
inline constexpr size_t kHeldLogBytes = 1 << 20;
void AppendLine(const std::string& path, const std::string& line);

// Serialises `msg` straight into the ring (no intermediate copy) as one record.
Status PushMessage(RingProducer* ring, uint32_t type, const google::protobuf::MessageLite& msg,
                   Deadline deadline);
// A group too large for `ring` becomes a failed group with its ids kept and its trajectories
// dropped, so it is still accounted for (the trainer drops it with this reason). Returns whether
// it had to.
bool FitGroupToRing(pb::TrajectoryGroup* group, uint32_t max_record_bytes);

// Parses a record's payload; kCorrupt naming the ring when it is not a valid `msg`.
Status ParseRecord(const RecordView& record, google::protobuf::MessageLite* msg,
                   const std::string& ring);

// The calling process's stop flag, set by SIGTERM/SIGINT (InstallStopHandlers) or, with
// `stop_with_parent` (a stage), when its supervisor dies: the kernel sends SIGTERM on parent
// death. serve and bench run on without the shell that started them.
void InstallStopHandlers(bool stop_with_parent = true);
bool StopRequested();
void RequestStop();

// A line on stderr prefixed with the local time, the stage role and pid:
// "14:03:07.412 [trainer 1234] ...".
void StageLog(const char* role, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// A long-running service's stage logs grew without end (every dropped record and failed
// candidate is a line). Once set, StageLog checks the size of the file on stderr: past
// `max_bytes` it renames `path` to <path>.1 (the one before goes) and puts a new
// `path` on stdout and stderr, so the two hold at most about twice `max_bytes` and no line is
// lost at the switch. Nothing is done while stderr is not `path` (redirected elsewhere).
inline constexpr uint64_t kStageLogBytes = 32ull << 20;
void SetStageLogFile(const std::string& path, uint64_t max_bytes = kStageLogBytes);
// <path>.1: where SetStageLogFile's rotation puts the older part ("rollout.log.1": not
// "rollout.1.log", which is rollout replica 1's own log).
std::string OlderStageLog(const std::string& path);

}  // namespace marlaas::pipeline

namespace marlaas::pipeline {
// The LoRA target mask of a job spec (all seven targets when the list is empty).
Result<uint32_t> TargetMaskOf(const pb::JobSpec& spec);
}  // namespace marlaas::pipeline

namespace marlaas::pipeline {
// The whole main() of a stage process: parses StageArgs, installs the stop handlers, runs `run`
// and turns its Status into the exit code (0 ok, 1 failed, 2 bad usage).
int StageMain(int argc, char** argv, const char* role, Status (*run)(const StageArgs&));
}  // namespace marlaas::pipeline

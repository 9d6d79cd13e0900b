// The multi-process pipeline end to end: real rollout, verifier and trainer processes under a
// real supervisor, on the tiny base model. Crash tests kill -9 stage processes mid-run.
#include "procs/common/pipeline.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "base/file_util.h"
#include "base/process.h"
#include "model/compute_threads.h"
#include "procs/cli/cli.h"
#include "procs/cli/run_jobs.h"
#include "procs/common/evaluation.h"
#include "procs/serve/admission.h"
#include "procs/serve/control_frame.h"
#include "procs/serve/control_handler.h"
#include "procs/serve/tenant_status.h"
#include "procs/serve/tokens.h"
#include "proto/job_spec.h"
#include "shm/adapter_store.h"
#include "shm/metrics.h"
#include "shm/ring_producer.h"
#include "tests/procs/pipeline_fixture.h"
#include "tests/test_util.h"

namespace marlaas::testing {
namespace {

namespace fs = std::filesystem;

// Waits until `pid` (a child of the service, killed) no longer counts as alive.
void WaitDead(pid_t pid) {
  const ProcessIdentity id = IdentityOf(pid);
  for (int i = 0; i < 500 && !id.empty() && IsAlive(id); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

// Takes over the producer end of `ring` (its producer was just killed) and commits junk.
void InjectJunk(const std::string& instance, const char* ring) {
  auto p = RingProducer::Attach({instance, ring});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::string junk = "\xff\xff\xff\xff not a protobuf message";
  ASSERT_TRUE(
      p->Push(pipeline::kGroupRecord, junk.data(), junk.size(), Deadline::AfterMs(1000)).ok());
}

// A custom task's JSONL dataset of 8 additions ("Q: i+1=", answer i+1) at `path`; returns it.
std::string WriteAdditionDataset(const std::string& path) {
  std::ofstream f(path);
  for (int i = 0; i < 8; ++i)
    f << nlohmann::json{{"id", std::to_string(i)},
                        {"prompt", "Q: " + std::to_string(i) + "+1=\nA:"},
                        {"reference", std::to_string(i + 1)}}
             .dump()
      << "\n";
  return path;
}

TEST_F(PipelineTest, KillEachStageMidRunLosesNothing) {
  StartService();
  const int kSteps = 12;
  ASSERT_TRUE(service_->Admit(SmallJob("arith", "arithmetic", kSteps, 1)).ok());
  ASSERT_TRUE(service_->Admit(SmallJob("py", "python_functions", kSteps, 2)).ok());
  auto store = AdapterStore::Attach(instance_);
  ASSERT_TRUE(store.ok());
  std::map<int, uint64_t> last_version;
  bool went_backwards = false;
  auto watch_versions = [&] {
    for (int slot = 0; slot < 2; ++slot) {
      auto v = store->PublishedVersion(slot);
      if (!v.ok()) continue;
      if (*v < last_version[slot]) went_backwards = true;
      last_version[slot] = *v;
    }
  };
  auto max_steps = [&] {
    uint64_t m = 0;
    for (const auto& t : service_->Tenants()) m = std::max(m, t.trainer.steps);
    return m;
  };
  // Kill the rollout, then the verifier, then the trainer, each once training is under way; after
  // the first two, commit a malformed record in the ring they produced.
  const struct {
    const char* role;
    uint64_t at_step;
    const char* ring;
  } kKills[] = {{"rollout", 2, pipeline::kTrajRing},
                {"verifier", 5, pipeline::kScoredRing},
                {"trainer", 8, nullptr}};
  std::map<std::string, uint64_t> published_at_trainer_kill;
  std::map<std::string, std::vector<std::string>> lines_at_trainer_kill;
  for (const auto& k : kKills) {
    ASSERT_TRUE(RunUntil([&] { return max_steps() >= k.at_step; }, 90, watch_versions))
        << "training stalled before killing the " << k.role;
    const pid_t pid = service_->StagePid(k.role);
    ASSERT_GT(pid, 0);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    WaitDead(pid);
    if (std::string(k.role) == "trainer") {
      for (const serve::TenantView& t : service_->Tenants()) {
        auto v = store->PublishedVersion(t.record.adapter_slot);
        ASSERT_TRUE(v.ok());
        published_at_trainer_kill[t.record.id] = *v;
        lines_at_trainer_kill[t.record.id] = LinesOf(TenantDir(t.record.id) + "/steps.jsonl");
      }
    }
    if (k.ring) InjectJunk(instance_, k.ring);
    // serve restarts it.
    EXPECT_TRUE(RunUntil(
        [&] { return service_->StagePid(k.role) > 0 && service_->StagePid(k.role) != pid; }, 30))
        << k.role << " was not restarted";
  }
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone() && Drained(); }, 150, watch_versions))
      << "the run did not complete after the kills";
  EXPECT_FALSE(went_backwards) << "an adapter version went backwards";
  for (const serve::StageView& s : service_->Stages())
    EXPECT_EQ(s.restarts, 1) << s.role << " was not restarted exactly once";
  size_t moved_lines = 0;
  for (const serve::TenantView& t : service_->Tenants()) {
    const std::string id = t.record.id;
    EXPECT_EQ(t.record.state, TenantState::kFinished) << id;
    EXPECT_EQ(t.trainer.steps, uint64_t(kSteps)) << id;
    // No committed group is lost: every one the rollout committed was trained or dropped (with
    // its reason logged), as recorded in the final checkpoint.
    const std::set<uint64_t> produced = Produced(id), retired = Retired(id);
    EXPECT_GE(produced.size(), uint64_t(kSteps) * 2) << id;
    for (uint64_t g : produced) EXPECT_TRUE(retired.count(g)) << id << " lost group " << g;
    EXPECT_EQ(retired.size(), t.trainer.groups + t.trainer.groups_dropped) << id;
    // The staleness bound held for everything trained.
    for (int b = 2; b < kStalenessBuckets; ++b) EXPECT_EQ(t.trainer.staleness[b], 0u) << id;
    // steps.jsonl holds every step once, in order: the lines the killed trainer logged after its
    // last checkpoint (those steps were trained again) moved to steps.lost.jsonl.
    const std::vector<std::string> lines = LinesOf(TenantDir(id) + "/steps.jsonl");
    const std::vector<std::string>& before = lines_at_trainer_kill[id];
    size_t kept = 0;  // lines from before the kill
    while (kept < before.size() && kept < lines.size() && lines[kept] == before[kept]) ++kept;
    EXPECT_EQ(LinesOf(TenantDir(id) + "/steps.lost.jsonl"),
              std::vector<std::string>(before.begin() + std::ptrdiff_t(kept), before.end()))
        << id;
    moved_lines += before.size() - kept;
    EXPECT_EQ(lines.size(), size_t(kSteps)) << id;
    bool resumed_behind = false;
    for (size_t n = 0; n < lines.size(); ++n) {
      auto e = nlohmann::json::parse(lines[n]);
      EXPECT_EQ(e["step"].get<size_t>(), n + 1) << id << ": " << lines[n];
      EXPECT_LE(e["staleness"].get<int>(), 1) << id << ": " << lines[n];
      // A trainer restarted behind what it had published (steps after its checkpoint lost)
      // republishes past the lost versions; then nothing sampled by a version published before
      // the kill is trained: those weights died with it, or are older than what it resumed from.
      const uint64_t published = published_at_trainer_kill[id];
      if (n == kept) resumed_behind = e["trained_at"].get<uint64_t>() > published;
      if (n >= kept && resumed_behind) {
        EXPECT_GT(e["behaviour_versions"][0].get<uint64_t>(), published) << id << ": " << lines[n];
      }
    }
    if (t.trainer.groups_dropped > 0) {
      EXPECT_NE(ReadAll(TenantDir(id) + "/trainer.log").find("dropped group"), std::string::npos)
          << id << " dropped groups without logging why";
    }
  }
  // Killed at step 8 or so with a checkpoint every 3, the leading tenant loses its last lines.
  if (moved_lines == 0) std::printf("note: the trainer was killed just after a checkpoint\n");
  // The malformed records were quarantined and logged, and no stage died of them.
  EXPECT_NE(ReadAll(state_dir_ + "/logs/verifier.log").find("quarantined"), std::string::npos);
  EXPECT_NE(ReadAll(state_dir_ + "/logs/trainer.log").find("quarantined"), std::string::npos);
}

TEST_F(PipelineTest, TwoRolloutReplicasShareTheTenantsAndAKilledOneLosesNothing) {
  rollout_replicas_ = 2;
  StartService();
  ASSERT_EQ(service_->Stages().size(), 4u);  // rollout, rollout.1, verifier, trainer
  const int kSteps = 6;
  // Rows 0..3: replica 0 serves rows 0 and 2, replica 1 rows 1 and 3; each has a tool tenant,
  // whose results must come back on its own replica's ring.
  const std::vector<std::pair<std::string, std::string>> tenants = {{"calc0", "calculator_tool"},
                                                                    {"calc1", "calculator_tool"},
                                                                    {"arith2", "arithmetic"},
                                                                    {"arith3", "arithmetic"}};
  std::vector<pb::JobSpec> jobs;
  for (size_t i = 0; i < tenants.size(); ++i) {
    jobs.push_back(SmallJob(tenants[i].first, tenants[i].second, kSteps, 10 + i));
    jobs.back().mutable_sampling()->set_max_new_tokens(40);  // room for a call and the answer
  }
  ASSERT_TRUE(service_->AdmitTogether(jobs).ok());
  auto max_steps = [&] {
    uint64_t m = 0;
    for (const auto& t : service_->Tenants()) m = std::max(m, t.trainer.steps);
    return m;
  };
  ASSERT_TRUE(RunUntil([&] { return max_steps() >= 2; }, 90)) << "training stalled";
  const pid_t pid = service_->StagePid("rollout.1");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  WaitDead(pid);
  EXPECT_TRUE(RunUntil(
      [&] { return service_->StagePid("rollout.1") > 0 && service_->StagePid("rollout.1") != pid; },
      30))
      << "rollout.1 was not restarted";
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone() && Drained(); }, 150))
      << "the run did not complete after the kill";
  for (const serve::StageView& s : service_->Stages())
    EXPECT_EQ(s.restarts, s.name == "rollout.1" ? 1 : 0) << s.name;
  auto replica0 = MetricsSegment::Attach(instance_, pipeline::RolloutName(0));
  auto replica1 = MetricsSegment::Attach(instance_, pipeline::RolloutName(1));
  ASSERT_TRUE(replica0.ok() && replica1.ok());
  for (const serve::TenantView& t : service_->Tenants()) {
    const std::string id = t.record.id;
    EXPECT_EQ(t.record.state, TenantState::kFinished) << id;
    EXPECT_EQ(t.trainer.steps, uint64_t(kSteps)) << id;
    // Only its own replica produced for it.
    const int mine = pipeline::ReplicaOfRow(t.row, 2);
    auto own = (mine == 0 ? replica0 : replica1)->LoadTenant(t.row);
    auto other = (mine == 0 ? replica1 : replica0)->LoadTenant(t.row);
    ASSERT_TRUE(own.ok() && other.ok()) << id;
    EXPECT_GT(own->groups, 0u) << id;
    EXPECT_EQ(other->groups, 0u) << id << " got groups from the other replica";
    EXPECT_EQ(t.rollout.groups, own->groups) << id;
    // Nothing committed was lost, the kill included.
    const std::set<uint64_t> produced = Produced(id), retired = Retired(id);
    for (uint64_t g : produced) EXPECT_TRUE(retired.count(g)) << id << " lost group " << g;
  }
  // Tool results went back to the replica that asked (a lost one fails its group after 30 s,
  // and the trainer drops a failed group): both tool tenants called the calculator, were
  // rewarded, and lost no group.
  for (const serve::TenantView& t : service_->Tenants()) {
    if (std::string(t.record.id).rfind("calc", 0) != 0) continue;
    EXPECT_GT(t.verifier.tool_calls, 0u) << t.record.id;
    // A group's later completions may repeat its first one's call, the same tokens up to it
    // (TenantMetrics::tool_calls_shared); its first never does. On the test base most of the
    // calculator's calls do (70% in the 32-tenant bench runs).
    EXPECT_GT(t.rollout.tool_calls_shared, 0u) << t.record.id;
    EXPECT_LE(t.rollout.tool_calls_shared * 4, t.verifier.tool_calls * 3) << t.record.id;
    EXPECT_GT(t.verifier.reward_sum, 0.0) << t.record.id;
    EXPECT_EQ(t.trainer.groups_dropped, 0u) << t.record.id;
  }
}

// Reward on a tenant's held-out prompts, sampled at temperature 1 (what GRPO optimises), from
// its latest checkpoint or, with `adapter` empty, the base.
double HeldOutSampledReward(const std::string& model_dir, const pb::JobSpec& job,
                            const std::string& adapter) {
  auto r =
      pipeline::EvaluateHeldOut(model_dir, job, adapter, int(job.dataset().eval_prompts()), 1.0f);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->mean_reward : 0;
}

TEST_F(PipelineTest, FourTenantsLearnTogether) {
  StartService();
  std::vector<pb::JobSpec> jobs;
  for (const auto& [id, task] :
       std::vector<std::pair<std::string, std::string>>{{"count1", "countdown"},
                                                        {"count2", "countdown"},
                                                        {"py", "python_functions"},
                                                        {"calc", "calculator_tool"}}) {
    // Three prompts a step and a gentler rate: with two, one step's reward swung between 0 and
    // 0.94 and the last checkpoint could land in a dip (a countdown tenant once ended below its
    // base).
    // Judged on 512 held-out samples: the sampled estimate's noise on a difference is then
    // ~0.03 (with 40 steps and 256 samples a countdown tenant once gained 0.08 where 0.1 was
    // asked; its other runs gained 0.12-0.2). 70 steps, then 90: the base is
    // pretrained by the build under test, so a kernel's rounding changes it; one whose countdown
    // reward starts at 0.40-0.44 (not 0.29) gained only 0.055-0.13 in 50 steps, and 0.12-0.19
    // in 70 (two runs each); then, with Python groups verified faster, 0.153-0.175 here but
    // 0.034 in a CI run whose machine was also building: 90 steps. The calculator tenant learns
    // least: +0.12-0.15 in three runs here, +0.061 in a CI run, +0.088 and +0.135 with 110 steps.
    // Hence each tenant must gain 0.05 (a tenant that does not learn: 0 +- 0.03) and the four
    // 0.1 on average.
    pb::JobSpec j = SmallJob(id, task, 90, 21 + jobs.size());
    j.mutable_dataset()->set_eval_prompts(512);
    j.set_group_size(8);
    j.set_prompts_per_step(3);
    j.mutable_sampling()->set_max_new_tokens(40);
    j.mutable_optimizer()->set_learning_rate(2e-3f);
    j.set_checkpoint_every(10);
    jobs.push_back(j);
    ASSERT_TRUE(service_->Admit(j).ok());
  }
  // A liveness bound, not a speed target: about 120 s here.
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 280)) << "training did not finish";
  double gains = 0;
  for (const pb::JobSpec& j : jobs) {
    const std::string model = TestBaseModel();
    const std::string latest = ReadAll(TenantDir(j.tenant()) + "/checkpoints/LATEST");
    const double base = HeldOutSampledReward(model, j, "");
    const double trained = HeldOutSampledReward(
        model, j, TenantDir(j.tenant()) + "/checkpoints/" + latest.substr(0, latest.find('\n')));
    std::printf("%-6s held-out sampled reward %.3f -> %.3f\n", j.tenant().c_str(), base, trained);
    EXPECT_GE(trained, base + 0.05) << j.tenant() << " did not learn";
    gains += trained - base;
  }
  EXPECT_GE(gains / double(jobs.size()), 0.1) << "the tenants learnt too little on average";
}

// Tenants competing for the rollout's batch get turns in round robin: two tenants of the same
// task and settings progress together, whatever else runs. (The rollout used to hand the slots
// that finished groups freed to the first tenants in its order, from wherever the turn had
// stopped: an 8-tenant demo had one arithmetic tenant at step 0 while its twin was at 26.)
// max_staleness 0 in the async service (not lockstep): the rollout starts a tenant's next
// groups only once the trainer has retired the last ones and published their adapter, so every
// group is trained at staleness 0 and none is dropped as stale, beside a tenant allowed 1.
TEST_F(PipelineTest, AnAsyncTenantWithStalenessZeroTrainsOnlyFreshGroups) {
  StartService();
  pb::JobSpec fresh = SmallJob("fresh", "arithmetic", 8, 3);
  fresh.set_max_staleness(0);
  ASSERT_TRUE(service_->Admit(fresh).ok());
  ASSERT_TRUE(service_->Admit(SmallJob("other", "countdown", 8, 4)).ok());
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 120)) << "training did not finish";
  for (const serve::TenantView& t : service_->Tenants()) {
    EXPECT_EQ(t.record.state, TenantState::kFinished) << t.record.id;
    if (std::string(t.record.id) != "fresh") continue;
    EXPECT_EQ(t.trainer.steps, 8u);
    EXPECT_GT(t.trainer.staleness[0], 0u);
    for (int b = 1; b < kStalenessBuckets; ++b) EXPECT_EQ(t.trainer.staleness[b], 0u) << b;
    EXPECT_EQ(t.trainer.groups_dropped, 0u) << ReadAll(TenantDir("fresh") + "/trainer.log");
  }
}

TEST_F(PipelineTest, TwinTenantsProgressTogether) {
  StartService();
  constexpr int kSteps = 10;
  const std::vector<std::pair<std::string, uint32_t>> kinds = {{"arithmetic", 16},
                                                               {"countdown", 4}};
  for (int k = 0; k < 4; ++k) {
    const auto& [task, pps] = kinds[size_t(k % 2)];
    pb::JobSpec j = SmallJob("twin" + std::to_string(k), task, kSteps, uint64_t(40 + k));
    j.set_group_size(8);
    j.set_prompts_per_step(pps);  // arithmetic: 2 steps x 16 groups x 8 in flight > the batch
    j.mutable_sampling()->set_max_new_tokens(task == "arithmetic" ? 8 : 24);
    ASSERT_TRUE(service_->Admit(j).ok());
  }
  // For each pair (twin0, twin2) and (twin1, twin3): the twin's step when the first finished.
  std::map<int, uint64_t> twin_at;
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 200,
                       [&] {
                         std::map<std::string, uint64_t> steps;
                         for (const serve::TenantView& t : service_->Tenants())
                           steps[t.record.id] = t.trainer.steps;
                         for (int p = 0; p < 2; ++p) {
                           const uint64_t a = steps["twin" + std::to_string(p)],
                                          b = steps["twin" + std::to_string(p + 2)];
                           if (!twin_at.count(p) && std::max(a, b) >= uint64_t(kSteps))
                             twin_at[p] = std::min(a, b);
                         }
                       }))
      << "training did not finish";
  for (int p = 0; p < 2; ++p) {
    ASSERT_TRUE(twin_at.count(p));
    std::printf("%s: when one twin finished, the other was at step %llu of %d\n",
                kinds[size_t(p)].first.c_str(), (unsigned long long)twin_at[p], kSteps);
    EXPECT_GE(twin_at[p], uint64_t(kSteps) * 2 / 3) << kinds[size_t(p)].first;
  }
}

TEST_F(PipelineTest, BrokenTenantVerifiersDoNotHarmOthers) {
  StartService();
  const std::string data = WriteAdditionDataset(state_dir_ + "/custom.jsonl");
  auto custom = [&](const std::string& id, const std::string& script) {
    pb::JobSpec j = SmallJob(id, "custom", 4, 9);
    j.mutable_dataset()->set_jsonl_path(data);
    j.mutable_dataset()->set_eval_prompts(2);
    j.mutable_verifier()->add_command("/bin/sh");
    j.mutable_verifier()->add_command("-c");
    j.mutable_verifier()->add_command(script);
    j.mutable_sandbox()->set_timeout_ms(300);
    return j;
  };
  ASSERT_TRUE(service_->Admit(SmallJob("good1", "arithmetic", 6, 3)).ok());
  ASSERT_TRUE(service_->Admit(custom("hangs", "sleep 60")).ok());
  ASSERT_TRUE(service_->Admit(custom("crashes", "kill -SEGV $$")).ok());
  // A Python-like traceback: its last line, the error's message, is what the reason must show.
  ASSERT_TRUE(service_
                  ->Admit(custom("raises",
                                 "echo 'Traceback (most recent call last):' >&2; i=0; "
                                 "while [ $i -lt 40 ]; do echo \"  File \\\"/v.py\\\", line "
                                 "$i, in check\" >&2; i=$((i+1)); done; "
                                 "echo 'ValueError: the reference is not a number' >&2; "
                                 "exit 3"))
                  .ok());
  ASSERT_TRUE(service_->Admit(SmallJob("good2", "countdown", 6, 4)).ok());
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 170)) << "the run did not finish";
  for (const serve::TenantView& t : service_->Tenants()) {
    const std::string id = t.record.id;
    if (id.rfind("good", 0) == 0) {
      EXPECT_EQ(t.record.state, TenantState::kFinished) << id;
      EXPECT_EQ(t.trainer.steps, 6u) << id;
      EXPECT_EQ(t.verifier.verifier_errors, 0u) << id;
    } else {
      // Its status says why; its groups were dropped with the reason, never scored as wrong.
      EXPECT_EQ(t.record.state, TenantState::kFailed) << id;
      EXPECT_NE(std::string(t.record.reason).find("verifier failed"), std::string::npos)
          << id << ": " << t.record.reason;
      EXPECT_EQ(t.trainer.steps, 0u) << id;
      EXPECT_NE(ReadAll(TenantDir(id) + "/trainer.log").find("verifier failed"), std::string::npos)
          << id;
    }
  }
  // The table's row keeps the reason's first bytes; the state file and `status` have all of it.
  const std::string why = "exited with 3: ...";
  const std::string last = "ValueError: the reference is not a number";
  const std::string state = ReadAll(TenantDir("raises") + "/state");
  EXPECT_NE(state.find(why), std::string::npos) << state;
  EXPECT_NE(state.find(last), std::string::npos) << state;
  auto tokens = serve::Tokens::Open(state_dir_);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  serve::ControlHandler handler(service_.get(), &*tokens);
  pb::ControlRequest r;
  r.set_token(tokens->admin());
  r.mutable_status()->set_tenant("raises");
  const pb::ControlReply status = handler.Handle(r);
  ASSERT_TRUE(status.ok() && status.status().tenants_size() == 1) << status.error();
  EXPECT_EQ(status.status().tenants(0).state(), "failed");
  EXPECT_NE(status.status().tenants(0).reason().find(last), std::string::npos)
      << status.status().tenants(0).reason();
  // The supervisor did not restart anything: a broken tenant verifier never crashes a stage.
  for (const serve::StageView& s : service_->Stages()) EXPECT_EQ(s.restarts, 0) << s.role;
}

// The verifier's queued jobs of a tenant that stopped are not run: with a verifier that takes a
// second per completion and a backlog of groups behind the one running, the backlog is handed on
// at once (cancelled, not counted as verifier errors) once the tenant stops, and at most the one
// that was running then is scored.
TEST_F(PipelineTest, AStoppedTenantsQueuedVerificationsAreNotRun) {
  StartService();
  const std::string data = WriteAdditionDataset(state_dir_ + "/custom.jsonl");
  pb::JobSpec slow = SmallJob("slow", "custom", 50, 5);
  slow.mutable_dataset()->set_jsonl_path(data);
  slow.mutable_dataset()->set_eval_prompts(2);
  slow.mutable_verifier()->add_command("/bin/sh");
  slow.mutable_verifier()->add_command("-c");
  slow.mutable_verifier()->add_command(R"(sleep 1; echo '{"reward": 1}')");
  slow.mutable_sandbox()->set_timeout_ms(5000);
  slow.set_group_size(2);
  ASSERT_TRUE(service_->Admit(slow).ok());
  auto view = [&] {
    for (const serve::TenantView& t : service_->Tenants())
      if (std::string(t.record.id) == "slow") return t;
    return serve::TenantView{};
  };
  // A backlog: groups committed by the rollout and not yet scored by the verifier.
  ASSERT_TRUE(RunUntil(
      [&] {
        const serve::TenantView t = view();
        return t.verifier.groups >= 1 && t.rollout.groups >= t.verifier.groups + 3;
      },
      120))
      << "rollout " << view().rollout.groups << " verifier " << view().verifier.groups << " errors "
      << view().verifier.verifier_errors << " trainer " << view().trainer.groups << " "
      << view().record.reason;
  const uint64_t scored = view().verifier.groups;
  ASSERT_TRUE(service_->StopTenant("slow").ok());
  auto verifier_items = [&] {
    for (const serve::StageView& s : service_->Stages())
      if (s.role == "verifier") return s.engine.items;
    return uint64_t(0);
  };
  // Every group record the rollout committed is handed on, the backlog without being run.
  ASSERT_TRUE(RunUntil([&] { return verifier_items() >= view().rollout.groups; }, 60));
  const serve::TenantView t = view();
  EXPECT_LE(t.verifier.groups, scored + 1) << "queued jobs of the stopped tenant ran";
  EXPECT_EQ(t.verifier.verifier_errors, 0u);
  EXPECT_GE(t.rollout.groups, scored + 3);
}

// `marlaas serve --job ...` exits 1 and names the tenants that failed, though the others
// finished (it said 0: a script could not tell).
TEST_F(PipelineTest, ServeExitsNonZeroAndNamesTheTenantsThatFailed) {
  const std::string data = WriteAdditionDataset(state_dir_ + "-custom.jsonl");
  ScopeExit remove_data([&] { fs::remove(data); });
  const std::string good = state_dir_ + "-good.json", broken = state_dir_ + "-broken.json";
  ScopeExit remove_jobs([&] {
    fs::remove(good);
    fs::remove(broken);
  });
  pb::JobSpec g = SmallJob("good", "arithmetic", 2, 3);
  pb::JobSpec b = SmallJob("broken", "custom", 2, 9);
  b.mutable_dataset()->set_jsonl_path(data);
  b.mutable_dataset()->set_eval_prompts(2);
  for (const char* arg : {"/bin/sh", "-c", "kill -SEGV $$"}) b.mutable_verifier()->add_command(arg);
  ASSERT_TRUE(WriteFileAtomically(good, JobSpecToJson(g)).ok());
  ASSERT_TRUE(WriteFileAtomically(broken, JobSpecToJson(b)).ok());
  ::testing::internal::CaptureStderr();
  const int rc =
      cli::RunServe({"--job", good, "--job", broken, "--state-dir", state_dir_, "--model-dir",
                     TestBaseModel(), "--instance", instance_, "--quiet", "--timeout-s", "200"});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::signal(SIGINT, SIG_DFL);  // RunJobs took them for Ctrl-C: this test process's again
  ::signal(SIGTERM, SIG_DFL);
  EXPECT_EQ(rc, 1) << err;
  EXPECT_NE(err.find("failed tenants: broken (reasons: marlaas status"), std::string::npos) << err;
  EXPECT_TRUE(fs::exists(TenantDir("good") + "/state"));
  EXPECT_EQ(ReadAll(TenantDir("good") + "/state").rfind("finished", 0), 0u);
  // Each tenant a job admitted got a token of its own, as a submitted one does.
  for (const char* id : {"good", "broken"}) {
    const std::string token = ReadAll(TenantDir(id) + "/token");
    EXPECT_EQ(token.size(), 33u) << id;  // 32 hex digits and a newline
    EXPECT_NE(token, ReadAll(state_dir_ + "/admin.token")) << id;
    EXPECT_EQ(fs::status(TenantDir(id) + "/token").permissions() & fs::perms::all,
              fs::perms::owner_read | fs::perms::owner_write)
        << id;
  }
}

// A tenant whose checkpoints cannot be written (here a file where its checkpoints folder goes;
// a full disk does the same): its steps reach the end, but it is not finished until they are
// saved (it was settled "finished" with nothing saved, the steps lost); meanwhile `status` says
// why, and once saving works again the trainer's retry saves them and it finishes.
TEST_F(PipelineTest, ATenantWhoseStepsCannotBeSavedIsNotFinishedUntilTheyAre) {
  StartService();
  const std::string ckpts = TenantDir("unsaved") + "/checkpoints";
  fs::create_directories(TenantDir("unsaved"));
  ASSERT_TRUE(WriteFileAtomically(ckpts, "in the way\n").ok());
  ASSERT_TRUE(service_->Admit(SmallJob("unsaved", "arithmetic", 4, 3)).ok());
  auto view = [&] { return service_->Tenants().at(0); };
  ASSERT_TRUE(RunUntil([&] { return view().trainer.steps >= 4; }, 90)) << "training stalled";
  EXPECT_FALSE(RunUntil([&] { return service_->AllDone(); }, 4))
      << "finished with none of its steps saved";
  serve::TenantView v = view();
  EXPECT_EQ(v.record.state, TenantState::kRunning);
  EXPECT_EQ(v.trainer.checkpointed_steps, 0u);
  const std::string reason = serve::TenantStatusOf(v).reason();
  EXPECT_EQ(reason.rfind("trainer: checkpoint: ", 0), 0u) << reason;
  EXPECT_FALSE(fs::exists(TenantDir("unsaved") + "/state"));
  ASSERT_TRUE(fs::remove(ckpts));
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 30))
      << "the steps were not saved once they could be";
  v = view();
  EXPECT_EQ(v.record.state, TenantState::kFinished);
  EXPECT_EQ(v.trainer.checkpointed_steps, 4u);
  EXPECT_EQ(v.trainer.last_error[0], '\0') << v.trainer.last_error;  // over once saved
  EXPECT_EQ(ReadAll(TenantDir("unsaved") + "/state").rfind("finished", 0), 0u);
  EXPECT_EQ(ReadAll(ckpts + "/LATEST").rfind("step-", 0), 0u);
}

// A stopped tenant whose state file cannot be written at once (status.json and state blocked
// by folders of those names): the state is tried again at every tick until it is written, so a
// restarted service does not resume the tenant (it trained a stopped tenant on).
TEST_F(PipelineTest, AStateThatCannotBeWrittenAtOnceIsWrittenLater) {
  StartService();
  ASSERT_TRUE(service_->Admit(SmallJob("blocked", "arithmetic", 400, 3)).ok());
  ASSERT_TRUE(RunUntil([&] { return service_->Tenants().at(0).trainer.steps >= 1; }, 90));
  for (const char* f : {"/status.json", "/state"}) fs::create_directories(TenantDir("blocked") + f);
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(service_->StopTenant("blocked").ok());
  RunUntil([] { return false; }, 0.3);
  EXPECT_TRUE(fs::is_directory(TenantDir("blocked") + "/state"));
  for (const char* f : {"/status.json", "/state"}) fs::remove(TenantDir("blocked") + f);
  RunUntil([&] { return fs::is_regular_file(TenantDir("blocked") + "/state"); }, 5);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(ReadAll(TenantDir("blocked") + "/state").rfind("stopped", 0), 0u) << err;
  EXPECT_NE(err.find("/state: "), std::string::npos) << err;
  EXPECT_NE(err.find("tried again while the service runs"), std::string::npos) << err;
}

// A newest checkpoint that is found bad when the trainer restarts: the trainer resumes from the
// one before, counts the groups the bad one had retired as lost (dropped: they were acknowledged
// on the ring), and the tenant trains to the end (the rollout's pacing, trained + dropped,
// stays whole; it used to wait for those groups for ever).
TEST_F(PipelineTest, ABadNewestCheckpointAtATrainerRestartLosesItsGroupsButNotTheTenant) {
  StartService();
  pb::JobSpec j = SmallJob("fallback", "arithmetic", 14, 3);
  j.set_checkpoint_every(2);
  ASSERT_TRUE(service_->Admit(j).ok());
  auto steps = [&] {
    const auto v = service_->Tenants();
    return v.empty() ? uint64_t(0) : v[0].trainer.steps;
  };
  ASSERT_TRUE(RunUntil([&] { return steps() >= 6; }, 90)) << "training stalled";
  const pid_t trainer = service_->StagePid("trainer");
  ASSERT_GT(trainer, 0);
  ASSERT_EQ(::kill(trainer, SIGSTOP), 0);  // no checkpoint is written while we break the newest
  const std::string ckpts = TenantDir("fallback") + "/checkpoints";
  // The newest folder (LATEST may not name it yet: the stop can fall between the two).
  std::string latest;
  for (const auto& e : fs::directory_iterator(ckpts)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0 && n > latest) latest = n;
  }
  ASSERT_FALSE(latest.empty());
  fs::resize_file(ckpts + "/" + latest + "/optimizer.pt", 10);
  ASSERT_EQ(::kill(trainer, SIGKILL), 0);
  WaitDead(trainer);
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 90))
      << "the tenant did not finish after its trainer fell back to an older checkpoint";
  const serve::TenantView v = service_->Tenants()[0];
  EXPECT_EQ(v.record.state, TenantState::kFinished);
  EXPECT_EQ(v.trainer.steps, 14u);
  const std::string log = ReadAll(TenantDir("fallback") + "/trainer.log");
  EXPECT_NE(log.find("trained groups with a bad checkpoint"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(ckpts + "/.bad-" + latest)) << latest;
  std::string now = ReadAll(ckpts + "/LATEST");  // names a checkpoint that is there
  while (!now.empty() && now.back() == '\n') now.pop_back();
  EXPECT_TRUE(fs::exists(ckpts + "/" + now + "/state.json")) << now;
}

// A tenant whose verifier is slow (within its timeout) holds back only its own groups: the
// verifier keeps taking records from the ring behind it (its window counts work not yet
// committed, not records waiting for their turn to be acknowledged, and at most 16 of one
// tenant's), so a calculator tenant's tool calls and groups, well over the window's 64 records,
// go through meanwhile, though the slow tenant has 80 groups in flight.
TEST_F(PipelineTest, ASlowTenantVerifierDoesNotHoldBackAnotherTenantsToolCalls) {
  StartService();
  const std::string data = WriteAdditionDataset(state_dir_ + "/slow.jsonl");
  pb::JobSpec slow = SmallJob("slow", "custom", 2, 9);
  slow.set_prompts_per_step(40);  // with max_staleness 1: 80 groups in flight
  slow.set_group_size(2);
  slow.mutable_dataset()->set_jsonl_path(data);
  slow.mutable_dataset()->set_eval_prompts(2);
  slow.mutable_verifier()->add_command("/bin/sh");
  slow.mutable_verifier()->add_command("-c");
  slow.mutable_verifier()->add_command("sleep 120; echo '{\"reward\": 1}'");
  slow.mutable_sandbox()->set_timeout_ms(150000);
  ASSERT_TRUE(service_->Admit(slow).ok());
  pb::JobSpec calc_job = SmallJob("calc", "calculator_tool", 24, 5);
  calc_job.mutable_sampling()->set_max_new_tokens(64);  // room for its tool calls
  ASSERT_TRUE(service_->Admit(calc_job).ok());
  auto view = [&](const std::string& id) {
    for (const serve::TenantView& v : service_->Tenants())
      if (id == v.record.id) return v;
    return serve::TenantView{};
  };
  ASSERT_TRUE(RunUntil([&] { return view("calc").record.state == TenantState::kFinished; }, 90))
      << "the calculator tenant waited behind the slow one";
  const serve::TenantView calc = view("calc"), held = view("slow");
  EXPECT_GT(calc.verifier.tool_calls, 64u);  // more than one window of them
  EXPECT_EQ(held.verifier.groups, 0u);       // its first group is still being verified
  EXPECT_EQ(held.record.state, TenantState::kRunning);
}

// A completion waits for its tool's result at most its tenant's tool_result_timeout_ms, then
// its group fails with that reason and the trainer drops it; the result that comes later is
// ignored. With every record held 1.5 s (median) by the modelled environment, a tenant allowed
// 200 ms loses each group that made a call, while one on the default 30 s trains.
TEST_F(PipelineTest, AToolResultLaterThanTheTenantsTimeoutFailsItsGroupAndNoOneElses) {
  env_latency_ms_ = 1500;
  StartService();
  pb::JobSpec impatient = SmallJob("impatient", "calculator_tool", 2, 5);
  impatient.mutable_sampling()->set_max_new_tokens(64);  // room for its tool calls
  impatient.set_tool_result_timeout_ms(200);
  ASSERT_TRUE(service_->Admit(impatient).ok());
  pb::JobSpec patient = SmallJob("patient", "calculator_tool", 1, 6);
  patient.mutable_sampling()->set_max_new_tokens(64);
  ASSERT_TRUE(service_->Admit(patient).ok());
  auto view = [&](const std::string& id) {
    for (const serve::TenantView& v : service_->Tenants())
      if (id == v.record.id) return v;
    return serve::TenantView{};
  };
  ASSERT_TRUE(RunUntil(
      [&] {
        return view("patient").record.state == TenantState::kFinished &&
               view("impatient").trainer.groups_dropped >= 4;
      },
      120))
      << ReadAll(TenantDir("impatient") + "/trainer.log");
  const serve::TenantView lost = view("impatient"), kept = view("patient");
  EXPECT_GT(lost.verifier.tool_calls, 0u);
  EXPECT_EQ(lost.trainer.steps, 0u);  // every group made a call, and every call timed out
  // Every group it dropped, it dropped for that reason (the log may be a pass ahead of the
  // metrics read above: the tenant drops on).
  const std::string log = ReadAll(TenantDir("impatient") + "/trainer.log");
  size_t dropped = 0, timed_out = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("dropped group") == std::string::npos) continue;
    ++dropped;
    if (line.find("got no result within 200 ms (tool_result_timeout_ms)") != std::string::npos)
      ++timed_out;
  }
  EXPECT_GE(dropped, lost.trainer.groups_dropped) << log;
  EXPECT_EQ(timed_out, dropped) << log;
  EXPECT_EQ(kept.trainer.steps, 1u);
  EXPECT_EQ(kept.trainer.groups_dropped, 0u) << ReadAll(TenantDir("patient") + "/trainer.log");
  EXPECT_GT(kept.verifier.tool_calls, 0u);
  for (const serve::StageView& st : service_->Stages()) {
    EXPECT_EQ(st.restarts, 0) << st.name;  // the late results were ignored, not a crash
    EXPECT_EQ(st.engine.errors, 0u) << st.name;
  }
}

// Tool-call ids carry the rollout's incarnation: a rollout killed with calls in flight is
// restarted and numbers its own calls from 1 again, and the results of its predecessor's calls,
// held 3 s (median) by the modelled environment, arrive after it has parked calls of its own.
// They must be ignored as nobody's, not given to the new calls of the same number.
TEST_F(PipelineTest, ResultsOfAKilledRolloutsToolCallsAreNotTakenByItsSuccessor) {
  env_latency_ms_ = 3000;
  StartService();
  pb::JobSpec calc = SmallJob("calc", "calculator_tool", 2, 7);
  calc.mutable_sampling()->set_max_new_tokens(64);  // room for its tool calls
  ASSERT_TRUE(service_->Admit(calc).ok());
  auto view = [&] {
    for (const serve::TenantView& v : service_->Tenants())
      if (std::string(v.record.id) == "calc") return v;
    return serve::TenantView{};
  };
  // A shared call is a group's second: calls are parked, their results seconds away.
  ASSERT_TRUE(RunUntil([&] { return view().rollout.tool_calls_shared > 0; }, 60));
  ASSERT_EQ(view().verifier.tool_calls, 0u) << "results came back before the kill";
  const pid_t pid = service_->StagePid("rollout");
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  WaitDead(pid);
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone() && Drained(); }, 120))
      << ReadAll(state_dir_ + "/logs/rollout.log");
  const serve::TenantView t = view();
  EXPECT_EQ(t.record.state, TenantState::kFinished);
  EXPECT_EQ(t.trainer.steps, 2u);
  EXPECT_EQ(t.trainer.groups_dropped, 0u) << ReadAll(TenantDir("calc") + "/trainer.log");
  const std::string log = ReadAll(state_dir_ + "/logs/rollout.log");
  EXPECT_NE(log.find("ignored the result of tool call"), std::string::npos)
      << "no result of the killed rollout's calls reached its successor:\n"
      << log;
  EXPECT_EQ(log.find("ignored a tool result for call"), std::string::npos)
      << "a result was matched to another completion's call by its number:\n"
      << log;
}

// A stage that is alive but hung (here: SIGSTOP) is killed once its metrics have not moved for
// the stall timeout, and restarted; its tenant then finishes, losing nothing. Idle stages (no
// tenant for over two timeouts) keep their metrics moving and are left alone. One that hangs
// each time it starts is given up on.
TEST_F(PipelineTest, AHungStageIsKilledAndRestartedAndIdleOnesAreLeftAlone) {
  stall_timeout_ms_ = 8000;  // far beyond a pass here, even with the machine loaded
  StartService();
  const auto restarts = [&] {
    int n = 0;
    for (const serve::StageView& st : service_->Stages()) n += st.restarts;
    return n;
  };
  // Idle for over two timeouts: nobody is taken for hung.
  EXPECT_FALSE(RunUntil([&] { return restarts() > 0; }, 17)) << "an idle stage was killed";
  ASSERT_TRUE(service_->Admit(SmallJob("arith", "arithmetic", 6, 11)).ok());
  auto steps = [&] {
    for (const serve::TenantView& t : service_->Tenants()) return t.trainer.steps;
    return uint64_t(0);
  };
  ASSERT_TRUE(RunUntil([&] { return steps() >= 2; }, 60));
  const pid_t hung = service_->StagePid("verifier");
  ASSERT_GT(hung, 0);
  ASSERT_EQ(kill(hung, SIGSTOP), 0);
  ScopeExit resume([hung] { kill(hung, SIGCONT); });  // should the watchdog fail to act
  ASSERT_TRUE(RunUntil(
      [&] {
        const pid_t now = service_->StagePid("verifier");
        return now > 0 && now != hung;
      },
      60))
      << "the stopped verifier was not replaced";
  EXPECT_FALSE(IsAlive(IdentityOf(hung)));
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone() && Drained(); }, 120))
      << "the tenant did not finish after the restart";
  for (const serve::StageView& st : service_->Stages())
    EXPECT_EQ(st.restarts, st.role == "verifier" ? 1 : 0) << st.name;
  for (const serve::TenantView& t : service_->Tenants()) {
    EXPECT_EQ(t.record.state, TenantState::kFinished);
    const std::set<uint64_t> produced = Produced("arith"), retired = Retired("arith");
    for (uint64_t g : produced) EXPECT_TRUE(retired.count(g)) << "lost group " << g;
  }
  // A stage that hangs again each time it is restarted is given up on after kGiveUpAfterStalls
  // kills in a row, and named, rather than killed every timeout for ever.
  for (int i = 0; i <= serve::kGiveUpAfterStalls && service_->failure().ok(); ++i) {
    ASSERT_TRUE(RunUntil([&] { return service_->StagesReady(); }, 60));
    const pid_t again = service_->StagePid("verifier");
    ASSERT_GT(again, 0);
    ASSERT_EQ(kill(again, SIGSTOP), 0);
    ScopeExit cont([again] { kill(again, SIGCONT); });
    ASSERT_TRUE(RunUntil([&] { return service_->StagePid("verifier") != again; }, 60));
  }
  const std::string failure = service_->failure().message();
  EXPECT_NE(failure.find("verifier ended " + std::to_string(serve::kGiveUpAfterStalls) +
                         " times in a row without progress"),
            std::string::npos)
      << failure;
  EXPECT_EQ(service_->StagePid("verifier"), 0);
}

// The demo's evaluations run several tenants at once; each result must be what it is alone, and
// one job's failure stays its own.
TEST(EvaluationTest, ParallelEvaluationsEqualSequentialOnesAndFailAlone) {
  const std::string model_dir = TestBaseModel();
  std::vector<pipeline::EvalJob> jobs;
  for (const char* task : {"python_functions", "arithmetic", "calculator_tool", "countdown"})
    jobs.push_back({SmallJob(std::string("e-") + task, task, 1, 5), ""});
  jobs[2].spec.mutable_dataset()->set_difficulty(3);
  jobs.push_back({SmallJob("e-bad", "arithmetic", 1, 5), "/nonexistent/adapter"});
  // The demo's process: LibTorch on one thread, OpenBLAS left at its default of every core (its
  // pthread pool then deadlocks under two calling threads unless the evaluation sets it to 1).
  model::SetComputeThreads(1);
  using SetBlasThreads = void (*)(int);
  if (auto set_blas =
          reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas(2);
  const auto all = pipeline::EvaluateHeldOutAll(model_dir, jobs, 2);
  EXPECT_EQ(model::ComputeThreads(), 1);  // put back
  ASSERT_EQ(all.size(), jobs.size());
  for (size_t k = 0; k + 1 < jobs.size(); ++k) {
    const auto alone = pipeline::EvaluateHeldOut(model_dir, jobs[k].spec, "",
                                                 int(jobs[k].spec.dataset().eval_prompts()));
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    ASSERT_TRUE(all[k].ok()) << jobs[k].spec.task() << ": " << all[k].status().ToString();
    EXPECT_EQ(all[k]->examples, 32) << jobs[k].spec.task();
    EXPECT_EQ(all[k]->completions, alone->completions) << jobs[k].spec.task();
    EXPECT_EQ(all[k]->rewards, alone->rewards) << jobs[k].spec.task();
    EXPECT_DOUBLE_EQ(all[k]->mean_reward, alone->mean_reward) << jobs[k].spec.task();
  }
  EXPECT_FALSE(all.back().ok());
  EXPECT_NE(all.back().status().message().find("/nonexistent/adapter"), std::string::npos)
      << all.back().status().ToString();
}

TEST_F(PipelineTest, StagesAreReadyOnceEachHasLoadedAndAfterARestartAgain) {
  StartService();
  // Just forked: no stage can have loaded the base yet.
  EXPECT_FALSE(service_->StagesReady());
  Status st = service_->WaitUntilReady(60'000);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (const serve::StageView& v : service_->Stages())
    EXPECT_GT(v.engine.started_mono_ns, 0) << v.role;
  const pid_t old = service_->StagePid(pipeline::kTrainerRole);
  ASSERT_EQ(kill(old, SIGKILL), 0);
  WaitDead(old);
  // A tick reaps it and starts another, which has not loaded yet. The leader thread shows as a
  // zombie before its other threads are gone, and only then can it be reaped: tick until it is.
  for (int i = 0; i < 2500 && service_->StagePid(pipeline::kTrainerRole) == old; ++i) {
    service_->Tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_NE(service_->StagePid(pipeline::kTrainerRole), old);
  EXPECT_FALSE(service_->StagesReady());
  st = service_->WaitUntilReady(60'000);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(service_->StagePid(pipeline::kTrainerRole), old);
  EXPECT_TRUE(service_->StagesReady());
}

// Service options for this test's instance whose base model folder does not exist.
serve::ServiceOptions WithoutAModel(const std::string& instance, const std::string& state_dir) {
  serve::ServiceOptions o;
  o.stage.instance = instance;
  o.stage.state_dir = state_dir;
  o.stage.model_dir = state_dir + "/no-such-model";
  o.stage.threads = 1;
  o.stage.verifier_workers = 2;
  o.bin_dir = MARLAAS_BIN_DIR;
  o.max_tenants = 2;
  return o;
}

TEST_F(PipelineTest, StagesThatCannotLoadTheirModelAreNamedWhenNotReady) {
  auto s = serve::Service::Start(WithoutAModel(instance_, state_dir_));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->WaitUntilReady(1500);
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.ToString();
  EXPECT_NE(st.message().find("rollout"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("trainer"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("verifier"), std::string::npos) << st.message();  // needs no model
  EXPECT_NE(st.message().find("/logs"), std::string::npos) << st.message();
}

// A stage that can never start (here: no base model) is restarted with a back-off, then given
// up on: the service's failure names it, how it last ended and its log, and no further restart
// happens; `marlaas serve` (RunJobs) returns that failure instead of restarting it forever.
TEST_F(PipelineTest, AStageThatKeepsEndingIsGivenUpOnAndNamed) {
  const serve::ServiceOptions o = WithoutAModel(instance_, state_dir_);
  {
    auto s = serve::Service::Start(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    serve::Service& service = **s;
    const Status st = service.WaitUntilReady(90'000);  // returns the failure, not a timeout
    ASSERT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_EQ(st.message(), service.failure().message());
    const std::string& m = st.message();
    EXPECT_TRUE(m.find("rollout") == 0 || m.find("trainer") == 0) << m;
    EXPECT_NE(m.find(std::to_string(serve::kGiveUpAfterCrashes) + " times in a row"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("exited with"), std::string::npos) << m;
    EXPECT_NE(m.find(state_dir_ + "/logs/"), std::string::npos) << m;
    // The cause from the stage's log, in the failure itself.
    EXPECT_NE(m.find(", saying: "), std::string::npos) << m;
    EXPECT_NE(m.find("no-such-model", m.find(", saying: ")), std::string::npos) << m;
    const std::string stage = m.substr(0, m.find(' '));
    // Given up: it stays down through further ticks (past the 1 s back-off), and its restart
    // count stops; the verifier, which needs no model, still runs.
    auto restarts = [&] {
      for (const serve::StageView& v : service.Stages())
        if (v.name == stage) return v.restarts;
      return -1;
    };
    const int before = restarts();
    EXPECT_EQ(before, serve::kGiveUpAfterCrashes - 1);  // the first start is not a restart
    for (int i = 0; i < 75; ++i) {
      service.Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(service.StagePid(stage), 0);
    EXPECT_EQ(restarts(), before);
    EXPECT_GT(service.StagePid(pipeline::kVerifierRole), 0);
  }
  // The same through RunJobs, as `marlaas serve` runs it: the failure, well before its timeout.
  cli::RunJobsOptions r;
  r.service = o;
  r.until_stopped = true;
  r.quiet = true;
  r.timeout_s = 120;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = cli::RunJobs(r);
  ::signal(SIGINT, SIG_DFL);  // RunJobs took them for Ctrl-C: this test process's again
  ::signal(SIGTERM, SIG_DFL);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kUnavailable) << report.status().ToString();
  EXPECT_NE(report.status().message().find("times in a row"), std::string::npos);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 100);
}

// The stages get serve's environment, with CUDA_VISIBLE_DEVICES replaced for a role that has its
// own GPUs (here the verifier's, MARLAAS_VERIFIER_GPUS) and inherited otherwise. Stand-in stage
// programs record their environment.
TEST_F(PipelineTest, StagesGetServesEnvironmentWithTheirOwnVisibleDevices) {
  const std::string bin = state_dir_ + "/bin";
  std::filesystem::create_directories(bin);
  for (const char* role : {"rollout", "verifier", "trainer"}) {
    const std::string path = bin + "/marlaas-" + role;
    std::ofstream(path) << "#!/bin/sh\nenv > \"$0.env.tmp\" && mv \"$0.env.tmp\" \"$0.env\"\n"
                           "exec sleep 60\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  ::setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  ::setenv("MARLAAS_VERIFIER_GPUS", "3", 1);
  ::setenv("MARLAAS_TEST_MARK", "kept", 1);
  serve::ServiceOptions o;
  o.stage.instance = instance_;
  o.stage.state_dir = state_dir_;
  o.stage.model_dir = state_dir_;
  o.bin_dir = bin;
  o.max_tenants = 2;
  auto s = serve::Service::Start(o);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  ::unsetenv("MARLAAS_VERIFIER_GPUS");
  ::unsetenv("MARLAAS_TEST_MARK");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::map<std::string, std::vector<std::string>> env;
  for (const char* role : {"rollout", "verifier", "trainer"}) {
    const std::string file = bin + "/marlaas-" + role + ".env";
    for (int i = 0; i < 500 && !std::filesystem::exists(file); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0 || line.rfind("MARLAAS_TEST_MARK=", 0) == 0)
        env[role].push_back(line);
  }
  for (auto& [role, lines] : env) std::sort(lines.begin(), lines.end());
  EXPECT_EQ(env["verifier"],
            (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=3", "MARLAAS_TEST_MARK=kept"}))
      << "its own devices, once";
  for (const char* role : {"rollout", "trainer"}) {
    EXPECT_EQ(env[role],
              (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=0,1", "MARLAAS_TEST_MARK=kept"}))
        << role << ": inherits serve's";
  }
  (*s)->Stop(500);
}

TEST_F(PipelineTest, ACudaServiceOnACpuOnlyBuildSaysWhyInEachModelStagesLog) {
  serve::ServiceOptions o;
  o.stage.instance = instance_;
  o.stage.state_dir = state_dir_;
  o.stage.model_dir = TestBaseModel();
  o.stage.device = "cuda";
  o.bin_dir = MARLAAS_BIN_DIR;
  o.max_tenants = 2;
  auto s = serve::Service::Start(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Status st = (*s)->WaitUntilReady(3000);
  if (st.ok()) GTEST_SKIP() << "this build and host run on CUDA";
  EXPECT_NE(st.message().find("rollout"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("trainer"), std::string::npos) << st.message();
  // Each model stage's log names the reason (a slow stage may write it after the wait above).
  for (const char* role : {"rollout", "trainer"}) {
    const std::string path = state_dir_ + "/logs/" + role + ".log";
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::string log = ReadAll(path);
    while (log.find("cannot run on CUDA") == std::string::npos &&
           std::chrono::steady_clock::now() < until) {
      (*s)->Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      log = ReadAll(path);
    }
    EXPECT_NE(log.find("cannot run on CUDA"), std::string::npos) << role << ": " << log;
  }
}

TEST_F(PipelineTest, InvalidJobSpecIsRefusedAndChangesNothing) {
  // The tenants' files and the logs are the service user's only, also when the folders were
  // there before with wider modes.
  fs::create_directories(state_dir_ + "/tenants");
  fs::permissions(state_dir_ + "/tenants", fs::perms::all);
  StartService();
  for (const char* sub : {"/tenants", "/logs"}) {
    struct stat st {};
    ASSERT_EQ(::stat((state_dir_ + sub).c_str(), &st), 0) << sub;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << sub;
  }
  pb::JobSpec bad = SmallJob("bad", "arithmetic", 3, 1);
  bad.mutable_lora()->set_rank(0);
  Status st = service_->Admit(bad);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lora.rank"), std::string::npos) << st.message();
  EXPECT_TRUE(service_->Tenants().empty());
  EXPECT_FALSE(fs::exists(TenantDir("bad")));
  ASSERT_TRUE(service_->Admit(SmallJob("ok", "arithmetic", 3, 1)).ok());
  st = service_->Admit(SmallJob("ok", "countdown", 3, 1));
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
  ASSERT_EQ(service_->Tenants().size(), 1u);
  EXPECT_STREQ(service_->Tenants()[0].record.task, "arithmetic");
}

// What the stages could not serve is refused at admission, naming why, and nothing is made: a
// custom task's unreadable or malformed dataset, an id the state dir already holds (a settled
// tenant's checkpoints and token stay its own), and a submit frame whose id is no path at all
// (it once threw from the filesystem and took serve down).
TEST_F(PipelineTest, AdmissionRefusesWhatTheStagesCouldNotServeAndChangesNothing) {
  StartService();
  pb::JobSpec missing = SmallJob("nodata", "custom", 3, 1);
  missing.mutable_dataset()->set_jsonl_path(state_dir_ + "/no-such.jsonl");
  missing.mutable_verifier()->add_command("/bin/true");
  Status st = service_->Admit(missing);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_NE(st.message().find("no-such.jsonl cannot be read"), std::string::npos) << st.message();
  pb::JobSpec relative = missing;  // beside wherever serve started: refused, not read
  relative.mutable_dataset()->set_jsonl_path("data/prompts.jsonl");
  st = service_->Admit(relative);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("'data/prompts.jsonl' must be an absolute path"), std::string::npos)
      << st.message();
  pb::JobSpec fifo = missing;  // a pipe: refused at once, not read until a writer comes
  fifo.mutable_dataset()->set_jsonl_path(state_dir_ + "/data.fifo");
  ASSERT_EQ(::mkfifo(fifo.dataset().jsonl_path().c_str(), 0600), 0);
  st = service_->Admit(fifo);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("data.fifo is not a regular file"), std::string::npos)
      << st.message();
  const std::string data = state_dir_ + "/empty-prompt.jsonl";
  std::ofstream(data) << R"({"id":"1","prompt":"Q: 1+1=","reference":"2"})"
                      << "\n"
                      << R"({"id":"2","prompt":"","reference":"3"})"
                      << "\n";
  pb::JobSpec empty = missing;
  empty.set_tenant("emptyprompt");
  empty.mutable_dataset()->set_jsonl_path(data);
  st = service_->Admit(empty);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("empty-prompt.jsonl:2"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("'prompt' is empty"), std::string::npos) << st.message();
  // Answers as long as the base's positions (512 in the tiny base) leave no room for a prompt.
  pb::JobSpec endless = SmallJob("endless", "arithmetic", 3, 1);
  endless.mutable_sampling()->set_max_new_tokens(512);
  st = service_->Admit(endless);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("sampling.max_new_tokens 512 leaves no room for a prompt in the "
                              "base model's 512 positions"),
            std::string::npos)
      << st.message();
  // An id whose directory holds a job.json from before (here written by hand).
  fs::create_directories(TenantDir("before"));
  std::ofstream(TenantDir("before") + "/job.json")
      << JobSpecToJson(SmallJob("before", "arithmetic", 3, 1));
  st = service_->Admit(SmallJob("before", "countdown", 3, 2));
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
  EXPECT_NE(st.message().find("already exists in this state dir"), std::string::npos);
  EXPECT_TRUE(service_->Tenants().empty());
  EXPECT_FALSE(fs::exists(TenantDir("nodata")));
  EXPECT_FALSE(fs::exists(TenantDir("emptyprompt")));
  // Over the control socket's handler: a 300-character id is a clear refusal.
  auto tokens = serve::Tokens::Open(state_dir_);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  serve::ControlHandler handler(service_.get(), &*tokens);
  pb::ControlRequest req;
  *req.mutable_submit()->mutable_job() = SmallJob(std::string(300, 'a'), "arithmetic", 3, 1);
  const pb::ControlReply reply = handler.Handle(req);
  EXPECT_FALSE(reply.ok());
  EXPECT_NE(reply.error().find("1-63 characters"), std::string::npos) << reply.error();
  EXPECT_TRUE(service_->Tenants().empty());
}

// `logs` with many long lines: the reply keeps the newest that fit one control frame and says
// how many it left out (it used to fail as a whole once it passed 1 MiB).
TEST_F(PipelineTest, ALogsReplyTooLargeForAFrameKeepsTheNewestLines) {
  StartService();
  fs::create_directories(TenantDir("big"));
  ASSERT_TRUE(WriteFileAtomically(TenantDir("big") + "/job.json",
                                  JobSpecToJson(SmallJob("big", "arithmetic", 1, 1)))
                  .ok());
  {
    std::ofstream log(TenantDir("big") + "/trainer.log"), steps(TenantDir("big") + "/steps.jsonl");
    for (int i = 0; i < 100; ++i) log << "event " << i << "\n";
    for (int i = 0; i < 2000; ++i)
      steps << "{\"step\": " << i << ", \"pad\": \"" << std::string(1000, 'x') << "\"}\n";
  }
  auto tokens = serve::Tokens::Open(state_dir_);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  serve::ControlHandler handler(service_.get(), &*tokens);
  pb::ControlRequest req;
  req.set_token(tokens->admin());
  req.mutable_logs()->set_tenant("big");
  req.mutable_logs()->set_max_lines(10000);
  const pb::ControlReply reply = handler.Handle(req);
  ASSERT_TRUE(reply.ok()) << reply.error();
  EXPECT_LE(reply.SerializeAsString().size(), serve::kMaxControlFrame);
  const auto& lines = reply.logs().lines();
  ASSERT_GT(lines.size(), 900);
  EXPECT_NE(lines[0].find("older lines left out"), std::string::npos) << lines[0];
  EXPECT_NE(lines[lines.size() - 1].find("\"step\": 1999,"), std::string::npos);
  req.mutable_logs()->set_max_lines(5);  // small enough: nothing left out
  const pb::ControlReply few = handler.Handle(req);
  ASSERT_TRUE(few.ok()) << few.error();
  ASSERT_EQ(few.logs().lines_size(), 10);
  EXPECT_EQ(few.logs().lines(0), "trainer.log: event 95");
}

// A custom tenant whose dataset is gone by the time its rollout first sees it: the rollout
// reports it once (no log line per poll) and serve fails the tenant with the reason; so is one
// whose prompts do not fit the base's positions; another tenant trains on.
TEST_F(PipelineTest, ATenantTheRolloutCannotServeIsFailedWithTheReason) {
  StartService();
  const std::string data = state_dir_ + "/vanishing.jsonl";
  std::ofstream(data) << R"({"id":"1","prompt":"Q: 1+1=\nA:","reference":"2"})"
                      << "\n"
                      << R"({"id":"2","prompt":"Q: 2+1=\nA:","reference":"3"})"
                      << "\n";
  pb::JobSpec gone = SmallJob("gone", "custom", 3, 1);
  gone.mutable_dataset()->set_jsonl_path(data);
  gone.mutable_dataset()->set_eval_prompts(1);
  gone.mutable_verifier()->add_command("/bin/true");
  // The rollout is paused while the tenant is admitted and its dataset removed, so it first
  // looks for the tenant after the file is gone.
  const pid_t rollout = service_->StagePid("rollout");
  ASSERT_GT(rollout, 0);
  ASSERT_EQ(::kill(rollout, SIGSTOP), 0);
  Status st = service_->Admit(gone);
  fs::remove(data);
  ::kill(rollout, SIGCONT);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(service_->Admit(SmallJob("fine", "arithmetic", 3, 2)).ok());
  // Prompts longer than the base's positions (the tiny base has 512): failed with the numbers,
  // not trained on extrapolated noise.
  const std::string long_data = state_dir_ + "/long.jsonl";
  {
    std::ofstream f(long_data);
    for (int i = 0; i < 3; ++i) {
      std::string sum = "Q: ";
      for (int k = 0; k < 700; ++k) sum += std::to_string((k * 7 + i) % 10) + "+";
      f << nlohmann::json{{"id", std::to_string(i)}, {"prompt", sum + "0=\nA:"}, {"reference", "1"}}
               .dump()
        << "\n";
    }
  }
  pb::JobSpec long_prompts = gone;
  long_prompts.set_tenant("long");
  long_prompts.mutable_dataset()->set_jsonl_path(long_data);
  ASSERT_TRUE(service_->Admit(long_prompts).ok());
  std::map<std::string, serve::TenantView> final_views;
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 120));
  for (const serve::TenantView& v : service_->Tenants()) final_views[v.record.id] = v;
  EXPECT_EQ(final_views["gone"].record.state, TenantState::kFailed);
  const std::string reason = final_views["gone"].record.reason;
  EXPECT_NE(reason.find("rollout: task cannot be loaded"), std::string::npos) << reason;
  EXPECT_EQ(final_views["fine"].record.state, TenantState::kFinished);
  EXPECT_EQ(final_views["long"].record.state, TenantState::kFailed);
  const std::string too_long = ReadAll(TenantDir("long") + "/rollout.error");
  EXPECT_NE(too_long.find("positions, and the base model has 512 (max_position_embeddings)"),
            std::string::npos)
      << too_long;
  const std::string log = ReadAll(state_dir_ + "/logs/rollout.log");
  size_t mentions = 0;
  for (size_t at = log.find("tenant gone:"); at != std::string::npos;
       at = log.find("tenant gone:", at + 1))
    ++mentions;
  EXPECT_EQ(mentions, 1u) << log;
}

// A rollout short of memory (a real address-space limit on the running process) goes on: a
// tenant whose one completion does not fit even alone is failed with the reason, and a tenant
// whose groups of 32 do not fit at once has some sequences set aside and finishes with nothing
// lost. The rollout is never restarted.
TEST_F(PipelineTest, ARolloutShortOfMemorySetsSequencesAsideAndFailsOnlyWhatCannotFitAlone) {
  StartService();
  ASSERT_TRUE(service_->WaitUntilReady(120'000).ok());
  const pid_t rollout = service_->StagePid("rollout");
  ASSERT_GT(rollout, 0);
  // Prompts of 450 tokens: one completion's prefill needs far more than the warm-up's.
  const std::string data = state_dir_ + "/long.jsonl";
  {
    std::ofstream f(data);
    for (int i = 0; i < 2; ++i)
      f << nlohmann::json{{"id", std::to_string(i)},
                          {"prompt", std::string(440, char('a' + i)) + " Q: 1+1=\nA:"},
                          {"reference", "2"}}
               .dump()
        << "\n";
  }
  pb::JobSpec long_prompt = SmallJob("long", "custom", 2, 1);
  long_prompt.mutable_dataset()->set_jsonl_path(data);
  long_prompt.mutable_dataset()->set_eval_prompts(1);
  long_prompt.mutable_verifier()->add_command("/bin/true");
  long_prompt.set_group_size(2);
  long_prompt.set_prompts_per_step(1);
  ASSERT_TRUE(LimitAddressSpaceToMappedPlus(rollout, 0)) << std::strerror(errno);
  ASSERT_TRUE(service_->Admit(long_prompt).ok());
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 120));
  std::map<std::string, serve::TenantView> views;
  for (const serve::TenantView& v : service_->Tenants()) views[v.record.id] = v;
  EXPECT_EQ(views["long"].record.state, TenantState::kFailed);
  const std::string reason = views["long"].record.reason;
  EXPECT_EQ(reason.rfind("rollout: out of memory generating one completion alone", 0), 0u)
      << reason;
  const std::string why = ReadAll(TenantDir("long") + "/rollout.error");
  EXPECT_NE(why.find("3 times in a row"), std::string::npos) << why;

  pb::JobSpec wide = SmallJob("wide", "arithmetic", 3, 2);
  wide.set_group_size(32);
  wide.set_prompts_per_step(3);
  ASSERT_TRUE(LimitAddressSpaceToMappedPlus(rollout, 0)) << std::strerror(errno);
  ASSERT_TRUE(service_->Admit(wide).ok());
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone() && Drained(); }, 240));
  views.clear();
  for (const serve::TenantView& v : service_->Tenants()) views[v.record.id] = v;
  EXPECT_EQ(views["wide"].record.state, TenantState::kFinished) << views["wide"].record.reason;
  EXPECT_EQ(views["wide"].trainer.steps, 3u);
  EXPECT_EQ(Produced("wide"), Retired("wide"));
  const std::string log = ReadAll(state_dir_ + "/logs/rollout.log");
  // The wide tenant's passes ran short too (after the long one's failure, which put the limit
  // back to its ceiling).
  const size_t failed_long = log.find("tenant long: not served: out of memory");
  ASSERT_NE(failed_long, std::string::npos) << log;
  EXPECT_NE(log.find("set aside until memory allows", failed_long), std::string::npos) << log;
  EXPECT_EQ(service_->StagePid("rollout"), rollout);  // never restarted
}

// A restarted service with fewer rows than unfinished tenants on disk resumes the ones that fit
// and leaves the rest on disk, instead of refusing to start; one it cannot resume is named.
TEST_F(PipelineTest, ResumingMoreTenantsThanFitResumesWhatFitsAndKeepsTheRest) {
  max_tenants_ = 1;
  StartService();
  for (const char* id : {"left1", "left2"}) {
    fs::create_directories(TenantDir(id));
    std::ofstream(TenantDir(id) + "/job.json") << JobSpecToJson(SmallJob(id, "arithmetic", 3, 1));
  }
  // One that never can be: its dataset is gone. It is failed on disk, with the reason.
  pb::JobSpec lost = SmallJob("lost", "custom", 3, 1);
  lost.mutable_dataset()->set_jsonl_path(state_dir_ + "/gone.jsonl");
  lost.mutable_verifier()->add_command("/bin/true");
  fs::create_directories(TenantDir("lost"));
  std::ofstream(TenantDir("lost") + "/job.json") << JobSpecToJson(lost);
  // One that trained and lost its job.json is named (it was skipped without a word); a folder a
  // refused admission left is not.
  fs::create_directories(TenantDir("orphan") + "/checkpoints");
  fs::create_directories(TenantDir("refused"));
  ::testing::internal::CaptureStderr();
  auto resumed = service_->ResumeTenants();
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("tenant orphan not resumed: " + TenantDir("orphan") +
                      "/job.json is missing (its checkpoints stay on disk)"),
            std::string::npos)
      << said;
  EXPECT_EQ(said.find("refused"), std::string::npos) << said;
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  const std::string state = ReadAll(TenantDir("lost") + "/state");
  EXPECT_EQ(state.rfind("failed: not resumed", 0), 0u) << state;
  EXPECT_NE(state.find("gone.jsonl"), std::string::npos) << state;
  ASSERT_EQ(resumed->size(), 1u);
  EXPECT_EQ(service_->Tenants().size(), 1u);
  const std::string waiting = resumed->front() == "left1" ? "left2" : "left1";
  EXPECT_TRUE(fs::exists(TenantDir(waiting) + "/job.json"));
  EXPECT_FALSE(fs::exists(TenantDir(waiting) + "/state"));  // not settled: a later serve resumes it
}

// `serve --job A --job B` on a state dir that holds A and B unfinished, with room for one: the
// one resumed trains to the end, and the other is left waiting on disk for a later service (not
// admitted again, which its id on disk refuses: serve used to fail on it).
TEST_F(PipelineTest, ServeWithJobsLeavesAJobWaitingOnDiskForALaterService) {
  max_tenants_ = 1;
  std::vector<pb::JobSpec> jobs;
  for (const char* id : {"left1", "left2"}) {
    jobs.push_back(SmallJob(id, "arithmetic", 2, 1));
    fs::create_directories(TenantDir(id));
    std::ofstream(TenantDir(id) + "/job.json") << JobSpecToJson(jobs.back());
  }
  cli::RunJobsOptions r;
  r.service = Options();
  r.jobs = jobs;
  r.resume = true;
  r.quiet = true;
  r.timeout_s = 240;  // a liveness bound: seconds here
  ::testing::internal::CaptureStderr();
  auto report = cli::RunJobs(r);
  ::signal(SIGINT, SIG_DFL);  // RunJobs took them for Ctrl-C: this test process's again
  ::signal(SIGTERM, SIG_DFL);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_FALSE(report->timed_out);
  const bool first = ReadAll(TenantDir("left1") + "/state").rfind("finished", 0) == 0;
  const std::string done = first ? "left1" : "left2", waiting = first ? "left2" : "left1";
  EXPECT_EQ(ReadAll(TenantDir(done) + "/state").rfind("finished", 0), 0u);
  EXPECT_TRUE(fs::exists(TenantDir(waiting) + "/job.json"));
  EXPECT_FALSE(fs::exists(TenantDir(waiting) + "/state"));  // unsettled: resumes later
  EXPECT_NE(err.find("tenant " + waiting + " waits on disk"), std::string::npos) << err;
}

// `serve --job A --job B --max-tenants 1`: B waits for A's row and then trains (serve used to
// fail on it, leaving A's job.json half done). Every job is checked before any is admitted: a
// bad one behind a waiting one is named at once. A job that could not fit an idle service is
// refused by name, not waited for for ever.
TEST_F(PipelineTest, JobsBeyondTheServicesRoomWaitAndTrainInTurn) {
  max_tenants_ = 1;
  const ScopeExit restore_signals([] {  // RunJobs took them (Ctrl-C, hangups, closed pipes)
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
  });
  cli::RunJobsOptions r;
  r.service = Options();
  r.quiet = true;
  r.timeout_s = 240;  // a liveness bound
  pb::JobSpec missing = SmallJob("nodata", "custom", 2, 3);
  missing.mutable_dataset()->set_jsonl_path(state_dir_ + "/no-such.jsonl");
  r.jobs = {SmallJob("early", "arithmetic", 2, 1), SmallJob("later", "countdown", 2, 2), missing};
  auto report = cli::RunJobs(r);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("admitting tenant 'nodata'"), std::string::npos)
      << report.status().ToString();
  EXPECT_FALSE(fs::exists(TenantDir("early") + "/job.json")) << "a job was admitted before";

  r.jobs = {SmallJob("turn1", "arithmetic", 2, 1), SmallJob("turn2", "countdown", 2, 2)};
  ::testing::internal::CaptureStderr();
  report = cli::RunJobs(r);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(report.ok()) << report.status().ToString() << "\n" << err;
  EXPECT_FALSE(report->timed_out);
  EXPECT_NE(err.find("tenant turn2 waits for room"), std::string::npos) << err;
  for (const char* id : {"turn1", "turn2"})
    EXPECT_EQ(ReadAll(TenantDir(id) + "/state").rfind("finished", 0), 0u) << id;

  const auto need =
      serve::EstimateTenantBytes(SmallJob("big", "arithmetic", 2, 1), TestBaseModel());
  ASSERT_TRUE(need.ok()) << need.status().ToString();
  r.service.memory_budget_bytes = *need / 2;
  r.jobs = {SmallJob("big", "arithmetic", 2, 1)};
  ::testing::internal::CaptureStderr();
  report = cli::RunJobs(r);
  const std::string big_err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->refused, std::vector<std::string>{"big"});
  EXPECT_NE(big_err.find("tenant big refused"), std::string::npos) << big_err;
  EXPECT_NE(big_err.find("memory budget"), std::string::npos) << big_err;
  EXPECT_FALSE(fs::exists(TenantDir("big") + "/job.json"));
}

TEST_F(PipelineTest, AdmittingTogetherChecksEverySpecFirstThenRunsThemAll) {
  StartService();
  pb::JobSpec bad = SmallJob("b2", "arithmetic", 3, 1);
  bad.mutable_lora()->set_rank(0);
  // A refused spec anywhere in the list: nobody is admitted, no tenant directory is made.
  Status st = service_->AdmitTogether({SmallJob("b1", "arithmetic", 3, 1), bad});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  st = service_->AdmitTogether(
      {SmallJob("d", "arithmetic", 3, 1), SmallJob("d", "countdown", 3, 2)});
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
  EXPECT_TRUE(service_->Tenants().empty());
  EXPECT_FALSE(fs::exists(TenantDir("b1")));
  EXPECT_FALSE(fs::exists(TenantDir("d")));
  // Accepted: every tenant is running when the call returns (none is left held).
  ASSERT_TRUE(
      service_
          ->AdmitTogether({SmallJob("a1", "arithmetic", 3, 1), SmallJob("a2", "countdown", 3, 2),
                           SmallJob("a3", "arithmetic", 3, 3)})
          .ok());
  ASSERT_EQ(service_->Tenants().size(), 3u);
  for (const auto& v : service_->Tenants())
    EXPECT_EQ(v.record.state, TenantState::kRunning) << v.record.id;
}

}  // namespace
}  // namespace marlaas::testing

// launch/marlaas-node's GPU plan (run with --dry-run against a fake nvidia-smi) and the per-stage
// CUDA_VISIBLE_DEVICES that serve derives from it (procs/serve/stage_gpus.h).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "procs/common/pipeline.h"
#include "procs/serve/stage_gpus.h"
#include "tests/test_util.h"

namespace marlaas::serve {
namespace {

struct LaunchResult {
  int status = -1;
  std::string out;
};

// A folder with a fake nvidia-smi that lists `gpus` GPUs (none: no nvidia-smi at all).
class FakeHost {
 public:
  explicit FakeHost(int gpus) {
    char tmpl[] = "/tmp/marlaas-node-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    if (gpus < 0) return;
    std::ofstream f(dir_ + "/nvidia-smi");
    f << "#!/bin/sh\n";
    for (int i = 0; i < gpus; ++i)
      f << "echo '" << i << ", GPU-0000000" << i << "-1111-2222-3333-444444444444, NVIDIA H200, "
        << "143771'\n";
    f.close();
    chmod((dir_ + "/nvidia-smi").c_str(), 0755);
  }
  ~FakeHost() { std::system(("rm -rf " + dir_).c_str()); }

  // From now on Launch runs a copy of launch/marlaas-node from <this folder>/launch, beside a
  // fake launch/marlaas (what the launcher starts serve through) that only appends its arguments
  // to ServeCalls()'s file. False if the copy could not be made.
  bool UseFakeServe() {
    if (std::system(("mkdir -p " + dir_ +
                     "/launch && cp " MARLAAS_SOURCE_DIR "/launch/marlaas-node " + dir_ +
                     "/launch/")
                        .c_str()) != 0)
      return false;
    std::ofstream f(dir_ + "/launch/marlaas");
    f << "#!/bin/sh\necho \"$@\" >> '" << dir_ << "/serve-calls'\n";
    f.close();
    if (chmod((dir_ + "/launch/marlaas").c_str(), 0755) != 0) return false;
    launcher_ = dir_ + "/launch/marlaas-node";
    return true;
  }
  // What the fake launch/marlaas was called with, one call a line ("" if never).
  std::string ServeCalls() const {
    std::ifstream f(dir_ + "/serve-calls");
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

  // Runs launch/marlaas-node with `args` and only this folder and the system's on PATH; killed
  // past 300 s (status 124 or 137), so that a launcher that hangs fails the test.
  LaunchResult Launch(const std::string& args) const {
    const std::string cmd = "timeout -k 5 300 env -i PATH=" + dir_ + ":/usr/bin:/bin " + launcher_ +
                            " " + args + " 2>&1";
    LaunchResult r;
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
    const int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
  }

 private:
  std::string dir_;
  std::string launcher_ = MARLAAS_SOURCE_DIR "/launch/marlaas-node";
};

bool Has(const LaunchResult& r, const std::string& line) {
  return r.out.find(line) != std::string::npos;
}

// The stages' GPU variables unset, and put back as they were at the end of the test (a failed
// ASSERT included), so that no test's settings reach the next.
struct StageGpuVariablesUnset {
  marlaas::testing::ScopedEnv trainer{"MARLAAS_TRAINER_GPUS", nullptr};
  marlaas::testing::ScopedEnv verifier{"MARLAAS_VERIFIER_GPUS", nullptr};
  marlaas::testing::ScopedEnv rollout{"MARLAAS_ROLLOUT_GPUS", nullptr};
};

TEST(NodeLauncherTest, EightGpusSplitTwoTrainersAndSixRolloutsAndStartNothingOnADryRun) {
  FakeHost host(8);
  const LaunchResult r = host.Launch("--dry-run --instance n1 -- --state-dir /tmp/x");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(Has(r, "marlaas-node: 8 GPU(s)")) << r.out;
  EXPECT_TRUE(Has(r, "trainer GPUs: 0,1\n")) << r.out;
  EXPECT_TRUE(Has(r, "rollout GPUs: 2,3,4,5,6,7\n")) << r.out;
  EXPECT_TRUE(Has(r, "env MARLAAS_VERIFIER_GPUS=\n")) << r.out;
  EXPECT_TRUE(Has(r, "env CUDA_DEVICE_ORDER=PCI_BUS_ID")) << r.out;
  EXPECT_TRUE(Has(r, "env NCCL_SOCKET_IFNAME=lo")) << r.out;
  EXPECT_TRUE(Has(r, "rollout processes: 6 (one per rollout GPU)")) << r.out;
  EXPECT_TRUE(Has(r, "launch/marlaas serve --instance n1 --rollout-replicas 6 --state-dir /tmp/x"))
      << r.out;
  // The same plan from a copy of the launcher whose launch/marlaas is a fake that records its
  // calls: a dry run never calls it, a run without --dry-run calls it with the printed command.
  ASSERT_TRUE(host.UseFakeServe());
  const std::string instance = "nodetest" + std::to_string(getpid());
  const LaunchResult dry =
      host.Launch("--dry-run --instance " + instance + " -- --state-dir /tmp/x");
  ASSERT_EQ(dry.status, 0) << dry.out;
  EXPECT_TRUE(Has(dry, "rollout processes: 6 (one per rollout GPU)")) << dry.out;
  EXPECT_EQ(host.ServeCalls(), "") << "a dry run started serve";
  const LaunchResult real = host.Launch("--instance " + instance + " -- --state-dir /tmp/x");
  ASSERT_EQ(real.status, 0) << real.out;
  EXPECT_EQ(host.ServeCalls(),
            "serve --instance " + instance + " --rollout-replicas 6 --state-dir /tmp/x\n")
      << real.out;
}

TEST(NodeLauncherTest, OneGpuIsSharedAndFlagsOverrideTheDefault) {
  FakeHost one(1);
  LaunchResult r = one.Launch("--dry-run");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(Has(r, "trainer GPUs: 0\n") && Has(r, "rollout GPUs: 0\n")) << r.out;
  EXPECT_TRUE(Has(r, "env CUDA_VISIBLE_DEVICES=0\n")) << r.out;  // each GPU once
  EXPECT_TRUE(Has(r, "--rollout-replicas 1")) << r.out;
  FakeHost four(4);
  r = four.Launch("--dry-run --trainer-gpus 3 --rollout-gpus 0,1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(Has(r, "trainer GPUs: 3\n") && Has(r, "rollout GPUs: 0,1\n")) << r.out;
  EXPECT_TRUE(Has(r, "env CUDA_VISIBLE_DEVICES=3,0,1\n")) << r.out;
  EXPECT_TRUE(Has(r, "--rollout-replicas 2")) << r.out;
}

TEST(NodeLauncherTest, BadPlansAreRefusedByName) {
  FakeHost four(4);
  LaunchResult r = four.Launch("--dry-run --trainer-gpus 0 --rollout-gpus 0,9");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Has(r, "--rollout-gpus: GPU '9' is not on this host")) << r.out;
  r = four.Launch("--dry-run --trainer-gpus 1 --rollout-gpus 1,2");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Has(r, "GPU 1 is both a trainer and a rollout GPU")) << r.out;
  for (const char* list : {"1,", ",1", "1,,2", "1;2"}) {  // the list goes into the environment
    r = four.Launch(std::string("--dry-run --trainer-gpus 0 --rollout-gpus '") + list + "'");
    EXPECT_EQ(r.status, 2) << list;
    EXPECT_TRUE(Has(r, "is not a list of GPU indices")) << r.out;
  }
  r = four.Launch("--dry-run --trainer-gpus 1");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Has(r, "give both --trainer-gpus and --rollout-gpus")) << r.out;
  r = four.Launch("--dry-run --instance 'a b'");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Has(r, "--instance 'a b'")) << r.out;
  FakeHost none(-1);
  r = none.Launch("--dry-run");
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(Has(r, "nvidia-smi is not on PATH")) << r.out;
}

TEST(StageGpusTest, EachRoleSeesItsOwnGpusAndBadListsAreNamed) {
  const StageGpuVariablesUnset unset;
  EXPECT_EQ(StageGpusVariable("rollout"), "MARLAAS_ROLLOUT_GPUS");
  auto inherit = StageVisibleDevices("trainer");
  ASSERT_TRUE(inherit.ok());
  EXPECT_FALSE(inherit->has_value());
  setenv("MARLAAS_TRAINER_GPUS", "0,GPU-8a1b2c3d-0000-1111-2222-333344445555", 1);
  auto listed = StageVisibleDevices("trainer");
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->value(), "0,GPU-8a1b2c3d-0000-1111-2222-333344445555");
  setenv("MARLAAS_VERIFIER_GPUS", "", 1);
  auto none = StageVisibleDevices("verifier");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->value(), "");  // no GPU at all, not "inherit"
  setenv("MARLAAS_ROLLOUT_GPUS", "1,;rm", 1);
  auto bad = StageVisibleDevices("rollout");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("MARLAAS_ROLLOUT_GPUS"), std::string::npos);
}

TEST(StageGpusTest, AdaptersCrossByCudaIpcOnlyWhenTrainerAndRolloutShareTheirGpus) {
  const StageGpuVariablesUnset unset;
  EXPECT_TRUE(*TrainerAndRolloutShareGpus());  // both inherit serve's
  setenv("MARLAAS_TRAINER_GPUS", "0", 1);
  setenv("MARLAAS_ROLLOUT_GPUS", "0", 1);
  EXPECT_TRUE(*TrainerAndRolloutShareGpus());  // marlaas-node on a one-GPU host
  setenv("MARLAAS_ROLLOUT_GPUS", "1,2,3", 1);
  EXPECT_FALSE(*TrainerAndRolloutShareGpus());  // rollouts elsewhere: host buffers, NCCL
  setenv("MARLAAS_TRAINER_GPUS", "", 1);
  setenv("MARLAAS_ROLLOUT_GPUS", "", 1);
  EXPECT_FALSE(*TrainerAndRolloutShareGpus());  // no GPU at all
  setenv("MARLAAS_ROLLOUT_GPUS", "x", 1);
  EXPECT_FALSE(TrainerAndRolloutShareGpus().ok());
}

TEST(StageGpusTest, EachRolloutReplicaSeesOneGpuOfTheRolloutList) {
  const StageGpuVariablesUnset unset;
  EXPECT_FALSE(ReplicaVisibleDevices(1, 2)->has_value());  // no list: inherit
  setenv("MARLAAS_ROLLOUT_GPUS", "2,3,5", 1);
  EXPECT_EQ(ReplicaVisibleDevices(0, 1)->value(), "2,3,5");  // one replica: the whole list
  EXPECT_EQ(ReplicaVisibleDevices(0, 3)->value(), "2");
  EXPECT_EQ(ReplicaVisibleDevices(1, 3)->value(), "3");
  EXPECT_EQ(ReplicaVisibleDevices(2, 3)->value(), "5");
  EXPECT_EQ(ReplicaVisibleDevices(3, 4)->value(), "2");  // more replicas than GPUs: shared
  setenv("MARLAAS_TRAINER_GPUS", "2", 1);
  setenv("MARLAAS_ROLLOUT_GPUS", "2", 1);
  EXPECT_TRUE(*TrainerAndRolloutShareGpus(2));  // both replicas on the trainer's GPU
  setenv("MARLAAS_ROLLOUT_GPUS", "2,3", 1);
  EXPECT_FALSE(*TrainerAndRolloutShareGpus(2));  // replica 1 is on GPU 3
  // Which replicas get adapters by NCCL broadcast: those off the trainer's GPU.
  EXPECT_EQ(*ReplicasOffTrainerGpus(2), std::vector<bool>({false, true}));
  setenv("MARLAAS_TRAINER_GPUS", "0,1", 1);
  setenv("MARLAAS_ROLLOUT_GPUS", "2,3,4", 1);
  EXPECT_EQ(*ReplicasOffTrainerGpus(3), std::vector<bool>({true, true, true}));
}

TEST(StageArgsTest, ReplicasTravelOnTheStageCommandLineAndAReplicaOutsideThemIsRefused) {
  pipeline::StageArgs a;
  a.instance = "i";
  a.state_dir = "/s";
  a.model_dir = "/m";
  a.rollout_replicas = 3;
  a.replica = 2;
  auto back = pipeline::ParseStageArgs(pipeline::StageArgv(a));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rollout_replicas, 3);
  EXPECT_EQ(back->replica, 2);
  EXPECT_EQ(back->log_file, "");  // run by hand: no log of its own to rotate
  a.log_file = "/s/logs/rollout.2.log";
  EXPECT_EQ(pipeline::ParseStageArgs(pipeline::StageArgv(a))->log_file, a.log_file);
  a.rollout_replicas = 2;
  auto bad = pipeline::ParseStageArgs(pipeline::StageArgv(a));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--replica 2 is not below --rollout-replicas 2"),
            std::string::npos)
      << bad.status().ToString();
  EXPECT_EQ(pipeline::TrajRingName(0), "ring.traj");
  EXPECT_EQ(pipeline::TrajRingName(2), "ring.traj.2");
  EXPECT_EQ(pipeline::ToolRingName(1), "ring.tools.1");
  EXPECT_EQ(pipeline::RolloutName(1), "rollout.1");
  EXPECT_EQ(pipeline::ReplicaOfRow(5, 1), 0);
  EXPECT_EQ(pipeline::ReplicaOfRow(5, 3), 2);
}

TEST(StageArgsTest, TheDeviceTravelsOnTheStageCommandLineAndBadNamesAreRefused) {
  pipeline::StageArgs a;
  a.instance = "i";
  a.state_dir = "/s";
  a.model_dir = "/m";
  EXPECT_EQ(pipeline::ParseStageArgs(pipeline::StageArgv(a))->device, "cpu");
  a.device = "cuda:1";
  auto back = pipeline::ParseStageArgs(pipeline::StageArgv(a));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->device, "cuda:1");
  std::vector<std::string> argv = pipeline::StageArgv(a);
  argv.back() = "tpu";
  auto bad = pipeline::ParseStageArgs(argv);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'tpu'"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace marlaas::serve

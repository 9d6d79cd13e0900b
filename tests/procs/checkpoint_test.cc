// Trainer checkpoints: a save/load round trip restores the adapter, the AdamW moments and every
// counter exactly; a truncated or altered newest checkpoint, or one whose state.json holds values
// the trainer never writes, is reported by file name and the previous one is loaded instead;
// with none loadable the error names them all.
#include "procs/trainer/checkpoint.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "model/pretrain.h"

namespace marlaas::trainer {
namespace {

namespace fs = std::filesystem;

struct Trained {
  model::LoraAdapter adapter;
  std::unique_ptr<torch::optim::AdamW> opt;
};

// An adapter after `steps` AdamW steps on a fixed pseudo-gradient.
Trained MakeTrained(const model::BaseWeights& base, int steps) {
  Trained t;
  t.adapter = *model::LoraAdapter::Create(base, 4, 8.0f, 0x7f, 3);
  t.adapter.flat().set_requires_grad(true);
  t.opt = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{t.adapter.flat()},
                                                torch::optim::AdamWOptions(1e-2));
  for (int i = 0; i < steps; ++i) {
    t.opt->zero_grad();
    auto loss = (t.adapter.flat() * torch::linspace(-1, 1, t.adapter.flat().numel())).sum() +
                t.adapter.flat().pow(2).sum();
    loss.backward();
    t.opt->step();
  }
  return t;
}

// The make_optimizer of LoadLatestCheckpoint: an AdamW over the loaded adapter, kept in *opt.
std::function<torch::optim::Optimizer*(model::LoraAdapter*)> OptimizerInto(
    std::unique_ptr<torch::optim::AdamW>* opt) {
  return [opt](model::LoraAdapter* a) {
    *opt = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{a->flat()},
                                                 torch::optim::AdamWOptions(1e-2));
    return opt->get();
  };
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path().string() + "/marlaas-ckpt-" + std::to_string(getpid());
    fs::remove_all(dir_);
    base_ = model::BaseWeights::Random(model::TinyConfig(), 5);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
  std::shared_ptr<model::BaseWeights> base_;
};

TEST_F(CheckpointTest, RoundTripRestoresAdapterOptimizerAndCounters) {
  Trained t = MakeTrained(*base_, 3);
  CheckpointState s;
  s.version = 4;
  s.steps = 3;
  s.groups_trained = 6;
  s.groups_dropped = 1;
  s.groups_degenerate = 2;
  s.data_cursor = 40;
  s.last_reward_mean = 0.375;
  for (uint64_t id : {11, 12, 99}) s.retired_groups.Insert(id);
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  std::unique_ptr<torch::optim::AdamW> opt;
  auto loaded = LoadLatestCheckpoint(dir_, *base_, [&](model::LoraAdapter* a) {
    a->flat().set_requires_grad(true);
    opt = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{a->flat()},
                                                torch::optim::AdamWOptions(1e-2));
    return opt.get();
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_TRUE(torch::equal(loaded->adapter.flat(), t.adapter.flat()));
  EXPECT_EQ(loaded->state.version, 4u);
  EXPECT_EQ(loaded->state.steps, 3u);
  EXPECT_EQ(loaded->state.groups_trained, 6u);
  EXPECT_EQ(loaded->state.groups_dropped, 1u);
  EXPECT_EQ(loaded->state.groups_degenerate, 2u);
  EXPECT_EQ(loaded->state.data_cursor, 40u);
  EXPECT_DOUBLE_EQ(loaded->state.last_reward_mean, 0.375);
  EXPECT_EQ(loaded->state.retired_groups.Ranges(),
            (std::vector<std::pair<uint64_t, uint64_t>>{{11, 12}, {99, 99}}));
  // The optimizer resumes exactly: one more step from either gives the same parameters.
  auto step = [](model::LoraAdapter& a, torch::optim::AdamW& o) {
    o.zero_grad();
    (a.flat() * torch::linspace(-1, 1, a.flat().numel())).sum().backward();
    o.step();
  };
  step(t.adapter, *t.opt);
  step(loaded->adapter, *opt);
  EXPECT_TRUE(torch::allclose(loaded->adapter.flat(), t.adapter.flat(), 0, 1e-7));
}

TEST_F(CheckpointTest, TruncatedNewestFallsBackToThePreviousAndSaysWhich) {
  for (uint64_t steps : {2, 4}) {
    Trained t = MakeTrained(*base_, int(steps));
    CheckpointState s;
    s.steps = steps;
    s.version = steps + 1;
    ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  }
  const std::string newest =
      dir_ + "/checkpoints/step-00000004-000000000000/adapter_model.safetensors";
  ASSERT_TRUE(fs::exists(newest));
  fs::resize_file(newest, fs::file_size(newest) / 2);
  std::unique_ptr<torch::optim::AdamW> opt;
  auto make = OptimizerInto(&opt);
  auto loaded = LoadLatestCheckpoint(dir_, *base_, make);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->state.steps, 2u);
  ASSERT_EQ(loaded->skipped.size(), 1u);
  EXPECT_NE(loaded->skipped[0].find("step-00000004-000000000000/adapter_model.safetensors"),
            std::string::npos)
      << loaded->skipped[0];
  // The bad one is set aside under .bad-<name>.
  EXPECT_FALSE(fs::exists(dir_ + "/checkpoints/step-00000004-000000000000"));
  EXPECT_TRUE(fs::exists(dir_ + "/checkpoints/.bad-step-00000004-000000000000/state.json"));
  {  // and LATEST names the one that loaded (export reads it)
    std::ifstream latest(dir_ + "/checkpoints/LATEST");
    std::string name;
    latest >> name;
    EXPECT_EQ(name, "step-00000002-000000000000");
  }
  // With none loadable, nothing is set aside (a restart must not take that for "no checkpoint"
  // and start over), and the error names each.
  Trained t6 = MakeTrained(*base_, 6);
  CheckpointState s6;
  s6.steps = 6;
  ASSERT_TRUE(SaveCheckpoint(dir_, t6.adapter, *t6.opt, s6).ok());
  fs::resize_file(dir_ + "/checkpoints/step-00000006-000000000000/optimizer.pt", 10);
  const std::string older = dir_ + "/checkpoints/step-00000002-000000000000/optimizer.pt";
  fs::resize_file(older, 10);
  auto none = LoadLatestCheckpoint(dir_, *base_, make);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(none.status().message().find("step-00000002-000000000000/optimizer.pt"),
            std::string::npos)
      << none.status().message();
  EXPECT_NE(none.status().message().find("step-00000006"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir_ + "/checkpoints/step-00000006-000000000000"));
  EXPECT_TRUE(fs::exists(dir_ + "/checkpoints/step-00000002-000000000000"));
}

// Falling back past a bad checkpoint loses the groups it had retired (the trainer acknowledged
// them on the ring when it wrote it): the loader counts them. Training that reaches the same
// step again writes a new checkpoint under that name, instead of taking the bad folder for one
// already saved.
TEST_F(CheckpointTest, AFallbackCountsTheLostGroupsAndTheSameStepIsSavedAgain) {
  for (uint64_t steps : {2, 4}) {
    Trained t = MakeTrained(*base_, int(steps));
    CheckpointState s;
    s.steps = steps;
    s.groups_trained = 2 * steps;
    ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  }
  const std::string bad = dir_ + "/checkpoints/step-00000004-000000000008";
  fs::resize_file(bad + "/optimizer.pt", 10);
  std::unique_ptr<torch::optim::AdamW> opt;
  auto make = OptimizerInto(&opt);
  auto loaded = LoadLatestCheckpoint(dir_, *base_, make);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->state.steps, 2u);
  EXPECT_EQ(loaded->lost_retired, 4u);  // 8 retired by step 4, 4 by step 2
  // Trained again to step 4 (other weights this time), with the same counters.
  Trained again = MakeTrained(*base_, 7);
  CheckpointState s;
  s.steps = 4;
  s.groups_trained = 8;
  ASSERT_TRUE(SaveCheckpoint(dir_, again.adapter, *again.opt, s).ok());
  auto reloaded = LoadLatestCheckpoint(dir_, *base_, make);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().ToString();
  EXPECT_EQ(reloaded->state.steps, 4u);
  EXPECT_EQ(reloaded->lost_retired, 0u);
  EXPECT_TRUE(reloaded->skipped.empty());
  EXPECT_TRUE(torch::equal(reloaded->adapter.flat(), again.adapter.flat()));
}

TEST_F(CheckpointTest, SavingAgainWithoutAStepKeepsTheOldFolderUntilTheNewIsIn) {
  Trained t = MakeTrained(*base_, 1);
  CheckpointState s;
  s.steps = 5;
  s.groups_trained = 10;
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());  // nothing new: same folder
  s.groups_dropped = 1;  // a late group dropped after the last step
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  EXPECT_TRUE(fs::exists(dir_ + "/checkpoints/step-00000005-000000000010/state.json"));
  EXPECT_TRUE(fs::exists(dir_ + "/checkpoints/step-00000005-000000000011/state.json"));
  std::unique_ptr<torch::optim::AdamW> opt;
  auto loaded = LoadLatestCheckpoint(dir_, *base_, [&](model::LoraAdapter* a) {
    opt = std::make_unique<torch::optim::AdamW>(std::vector<torch::Tensor>{a->flat()},
                                                torch::optim::AdamWOptions(1e-2));
    return opt.get();
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->state.groups_dropped, 1u);
}

// A save without a step (a finished tenant's late groups) links the newest checkpoint's adapter
// and optimizer files instead of writing them again, unless one of them is damaged; the linked
// checkpoint loads, and a save after a step writes its own files.
TEST_F(CheckpointTest, ASaveWithoutAStepLinksTheUnchangedFilesUnlessDamaged) {
  Trained t = MakeTrained(*base_, 2);
  CheckpointState s;
  s.steps = 5;
  s.version = 5;
  s.groups_trained = 10;
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  s.groups_dropped = 1;
  s.retired_groups.Insert(7);
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  const std::string root = dir_ + "/checkpoints/";
  const std::string first = root + "step-00000005-000000000010";
  const std::string again = root + "step-00000005-000000000011";
  const char* kWeights[] = {"/adapter_model.safetensors", "/optimizer.pt"};
  for (const char* f : kWeights) EXPECT_TRUE(fs::equivalent(first + f, again + f)) << f;
  std::unique_ptr<torch::optim::AdamW> opt;
  auto loaded = LoadLatestCheckpoint(dir_, *base_, OptimizerInto(&opt));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->dir, again);
  EXPECT_TRUE(loaded->state.retired_groups.Contains(7));
  EXPECT_EQ(loaded->state.retired_groups.size(), 1u);
  EXPECT_TRUE(torch::equal(loaded->adapter.flat(), t.adapter.flat()));
  // Damaged on disk (both names are one file): the next save writes both files from memory.
  { std::ofstream(again + "/optimizer.pt", std::ios::app) << "x"; }
  s.groups_dropped = 2;
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  const std::string third = root + "step-00000005-000000000012";
  for (const char* f : kWeights) EXPECT_FALSE(fs::equivalent(again + f, third + f)) << f;
  loaded = LoadLatestCheckpoint(dir_, *base_, OptimizerInto(&opt));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->dir, third);
  // A step (new version): written anew, not linked.
  s.steps = 6;
  s.version = 6;
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  for (const char* f : kWeights)
    EXPECT_FALSE(fs::equivalent(third + f, root + "step-00000006-000000000012" + f)) << f;
}

// A checkpoint keeps its retired group ids as ranges (a tenant's ids come in runs: a few ranges
// however long it trains); one written before, with every id listed, still loads.
// Linked folders are one copy of the weights: the keep-two rule keeps an older folder with its
// own files, and a damage to the shared ones falls back to it.
TEST_F(CheckpointTest, LinkedFoldersCountAsOneCopyWhenOlderOnesAreRemoved) {
  Trained t = MakeTrained(*base_, 2);
  CheckpointState s;
  s.steps = 4;
  s.version = 4;
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  s.steps = 5;
  s.version = 5;
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  for (uint64_t dropped = 1; dropped <= 2; ++dropped) {  // two saves without a step: linked
    s.groups_dropped = dropped;
    ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  }
  const std::string root = dir_ + "/checkpoints/";
  EXPECT_TRUE(fs::exists(root + "step-00000004-000000000000")) << "the only other copy";
  EXPECT_TRUE(fs::exists(root + "step-00000005-000000000002"));
  EXPECT_TRUE(fs::exists(root + "step-00000005-000000000001"));
  EXPECT_FALSE(fs::exists(root + "step-00000005-000000000000"));  // a third name for one copy
  { std::ofstream(root + "step-00000005-000000000002/optimizer.pt", std::ios::app) << "x"; }
  std::unique_ptr<torch::optim::AdamW> opt;
  auto loaded = LoadLatestCheckpoint(dir_, *base_, OptimizerInto(&opt));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->dir, root + "step-00000004-000000000000");
}

TEST_F(CheckpointTest, RetiredGroupsAreRangesAndTheOldListStillLoads) {
  Trained t = MakeTrained(*base_, 1);
  CheckpointState s;
  s.steps = 2;
  for (uint64_t id = 0; id < 5000; ++id) s.retired_groups.Insert((1ull << 32) | id);
  s.retired_groups.Insert(7);
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  const std::string state = dir_ + "/checkpoints/step-00000002-000000000000/state.json";
  nlohmann::json st = nlohmann::json::parse(std::ifstream(state));
  EXPECT_EQ(st["retired_ranges"].size(), 2u);
  std::unique_ptr<torch::optim::AdamW> opt;
  auto loaded = LoadLatestCheckpoint(dir_, *base_, OptimizerInto(&opt));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->state.retired_groups.size(), 5001u);
  EXPECT_TRUE(loaded->state.retired_groups.Contains((1ull << 32) | 4999));
  // The older layout: every id in "retired_groups".
  st.erase("retired_ranges");
  st["retired_groups"] = std::vector<uint64_t>{3, 4, 9};
  { std::ofstream(state) << st.dump(); }
  loaded = LoadLatestCheckpoint(dir_, *base_, OptimizerInto(&opt));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->state.retired_groups.Ranges(),
            (std::vector<std::pair<uint64_t, uint64_t>>{{3, 4}, {9, 9}}));
  st.erase("retired_groups");  // a range that runs backwards is refused by name
  st["retired_ranges"] = {{9, 3}};
  { std::ofstream(state) << st.dump(); }
  loaded = LoadLatestCheckpoint(dir_, *base_, OptimizerInto(&opt));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("runs backwards"), std::string::npos)
      << loaded.status().ToString();
}

// state.json parses, but a value in it is one the trainer never writes: the checkpoint is set
// aside by name like a damaged one. (A negative count used to wrap round: "steps": -5 read as
// 2^64 - 5, and the tenant was taken for finished.)
TEST_F(CheckpointTest, ImpossibleCountersInStateJsonAreADamagedCheckpoint) {
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](nlohmann::json& st) { st["steps"] = -5; }, "'steps' is not a whole number >= 0"},
      {[](nlohmann::json& st) { st["steps"] = 5000; }, "'steps' is 5000, its folder says 4"},
      {[](nlohmann::json& st) { st["version"] = -3; }, "'version' is not a whole number >= 0"},
      {[](nlohmann::json& st) { st["version"] = 1ull << 62; }, "past the store's limit"},
      {[](nlohmann::json& st) { st["data_cursor"] = -1; }, "'data_cursor' is not a whole number"},
      {[](nlohmann::json& st) { st["groups_trained"] = 9; },
       "'groups_trained' + 'groups_dropped' is 9, its folder says 8"},
      {[](nlohmann::json& st) { st["groups_degenerate"] = 99; }, "more degenerate groups"},
      {[](nlohmann::json& st) { st["steps"] = 4.5; }, "'steps' is not a whole number >= 0"},
  };
  for (const auto& [edit, why] : edits) {
    fs::remove_all(dir_);
    for (uint64_t steps : {2, 4}) {
      Trained t = MakeTrained(*base_, int(steps));
      CheckpointState s;
      s.steps = steps;
      s.version = steps + 1;
      s.groups_trained = 2 * steps;
      ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
    }
    const std::string state = dir_ + "/checkpoints/step-00000004-000000000008/state.json";
    nlohmann::json st = nlohmann::json::parse(std::ifstream(state));
    edit(st);
    { std::ofstream(state) << st.dump(); }
    std::unique_ptr<torch::optim::AdamW> opt;
    auto loaded = LoadLatestCheckpoint(dir_, *base_, OptimizerInto(&opt));
    ASSERT_TRUE(loaded.ok()) << why << ": " << loaded.status().ToString();
    EXPECT_EQ(loaded->state.steps, 2u) << why;
    ASSERT_EQ(loaded->skipped.size(), 1u) << why;
    EXPECT_NE(loaded->skipped[0].find("step-00000004-000000000008/state.json"), std::string::npos)
        << loaded->skipped[0];
    EXPECT_NE(loaded->skipped[0].find(why), std::string::npos) << loaded->skipped[0];
  }
}

TEST_F(CheckpointTest, KeepsOnlyTheTwoNewest) {
  Trained t = MakeTrained(*base_, 1);
  for (uint64_t steps = 1; steps <= 4; ++steps) {
    CheckpointState s;
    s.steps = steps;
    ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_ + "/checkpoints"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"LATEST", "step-00000003-000000000000",
                                             "step-00000004-000000000000"}));
}

// A save that runs out of space (here the file-size limit, as a full disk would): it fails with
// the error, leaves no half-written folder and the previous checkpoint as it was. LibTorch's
// writer threw from a destructor at the optimizer's file, which ended the trainer; and each
// failed save left its folder behind, holding the space the next one needed.
TEST_F(CheckpointTest, ASaveWithoutSpaceFailsCleanlyAndLeavesTheLastOne) {
  Trained t = MakeTrained(*base_, 2);
  CheckpointState s;
  s.steps = 1;
  ASSERT_TRUE(SaveCheckpoint(dir_, t.adapter, *t.opt, s).ok());
  const std::string root = dir_ + "/checkpoints";
  const std::string first = root + "/step-00000001-000000000000";
  const auto adapter_bytes = fs::file_size(first + "/adapter_model.safetensors");
  ASSERT_GT(fs::file_size(first + "/optimizer.pt"), adapter_bytes + 4096);
  // What a killed trainer left.
  fs::create_directories(root + "/.tmp-step-00000009-000000000000-99999");
  std::ofstream(root + "/.tmp-step-00000009-000000000000-99999/optimizer.pt") << "half";
  s.steps = 2;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The adapter's file fits, the optimizer's does not: EFBIG (SIGXFSZ ignored).
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{adapter_bytes + 4096, adapter_bytes + 4096};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const Status st = SaveCheckpoint(dir_, t.adapter, *t.opt, s);
    const bool named = st.message().find("optimizer.pt") != std::string::npos;
    ::_exit(st.ok() ? 1 : named ? 0 : 2);
  }
  int ws = 0;
  ASSERT_EQ(::waitpid(child, &ws, 0), child);
  ASSERT_TRUE(WIFEXITED(ws)) << "the save ended the process (signal " << WTERMSIG(ws) << ")";
  EXPECT_EQ(WEXITSTATUS(ws), 0) << "1: it succeeded, 2: the error does not name optimizer.pt";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"LATEST", "step-00000001-000000000000"}))
      << "a half-written folder was left";
  std::unique_ptr<torch::optim::AdamW> opt;
  auto loaded = LoadLatestCheckpoint(dir_, *base_, OptimizerInto(&opt));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->state.steps, 1u);
}

}  // namespace
}  // namespace marlaas::trainer

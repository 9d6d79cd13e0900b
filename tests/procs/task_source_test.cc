// TaskSource for task "custom": the tenant's verifier runs in the sandbox with only what the job
// carries. A job stored in the service (already past the client) whose command names a host
// file gets nothing of the host: the verifier process does not read paths for a tenant.
#include "procs/common/task_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>

#include "tests/test_util.h"

namespace marlaas::pipeline {
namespace {

// A custom job whose one-example dataset is written in `dir`.
pb::JobSpec CustomJob(const testing::ScopedTempDir& dir, const std::string& tag) {
  const std::string data = dir.path() + "/ts-" + tag + ".jsonl";
  std::ofstream(data) << R"({"id": "p0", "prompt": "Q: 1+1=", "reference": "2", "metadata": "{}"})"
                      << "\n";
  pb::JobSpec j;
  j.set_tenant("t-" + tag);
  j.set_task("custom");
  j.mutable_dataset()->set_jsonl_path(data);
  j.mutable_sandbox()->set_timeout_ms(2000);
  j.mutable_sandbox()->set_memory_mb(256);
  j.mutable_sandbox()->set_max_output_bytes(4096);
  j.mutable_sandbox()->set_max_processes(8);
  return j;
}

TEST(TaskSourceTest, AVerifierCommandNamingAHostFileReadsNothingOfTheHost) {
  const testing::ScopedTempDir dir("task-source");
  pb::JobSpec j = CustomJob(dir, "host");
  for (const char* a : {"/bin/sh", "-c", "cat \"$0\" || echo '{\"reward\": 0.5}'", "/etc/passwd"})
    j.mutable_verifier()->add_command(a);
  auto source = TaskSource::ForJob(j);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const tasks::TaskExample e = (*source)->Train(0);
  const sandbox::Verdict v = (*source)->Verify(e, " 2");
  // /etc/passwd does not exist in the sandbox: cat fails, the fallback reward is printed.
  EXPECT_TRUE(v.scored()) << v.detail;
  EXPECT_DOUBLE_EQ(v.reward, 0.5) << v.detail;
  EXPECT_EQ(v.detail.find("root:"), std::string::npos) << v.detail;
}

TEST(TaskSourceTest, TheJobsOwnFilesAreInTheWorkDir) {
  const testing::ScopedTempDir dir("task-source");
  pb::JobSpec j = CustomJob(dir, "files");
  for (const char* a : {"/bin/sh", "check.sh"}) j.mutable_verifier()->add_command(a);
  (*j.mutable_verifier()->mutable_files())["check.sh"] =
      "grep -Eq '\"completion\": ?\" 2\"' && echo '{\"reward\": 1}' || echo '{\"reward\": 0}'\n";
  auto source = TaskSource::ForJob(j);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const tasks::TaskExample e = (*source)->Train(0);
  sandbox::Verdict v = (*source)->Verify(e, " 2");
  ASSERT_TRUE(v.scored()) << v.detail;
  EXPECT_DOUBLE_EQ(v.reward, 1.0);
  v = (*source)->Verify(e, " 3");
  ASSERT_TRUE(v.scored()) << v.detail;
  EXPECT_DOUBLE_EQ(v.reward, 0.0);
}

// A tenant's command verifies each completion in a run of its own; after an infrastructure
// failure (a completion its program crashes on) the rest of the batch stays unscored.
TEST(TaskSourceTest, VerifyAllRunsTheCommandPerCompletionAndStopsAtAFailure) {
  const testing::ScopedTempDir dir("task-source");
  pb::JobSpec j = CustomJob(dir, "all");
  for (const char* a : {"/bin/sh", "check.sh"}) j.mutable_verifier()->add_command(a);
  (*j.mutable_verifier()->mutable_files())["check.sh"] =
      "read -r line; case \"$line\" in *crash*) exit 3;; *'\" 2\"'*) echo '{\"reward\": 1}';;"
      " *) echo '{\"reward\": 0}';; esac\n";
  auto source = TaskSource::ForJob(j);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const tasks::TaskExample e = (*source)->Train(0);
  const std::vector<const tasks::TaskExample*> four(4, &e);
  std::vector<sandbox::Verdict> v = (*source)->VerifyAll(four, {" 2", " 3", " crash", " 2"});
  ASSERT_EQ(v.size(), 4u);
  EXPECT_DOUBLE_EQ(v[0].reward, 1.0) << v[0].detail;
  EXPECT_TRUE(v[1].scored());
  EXPECT_DOUBLE_EQ(v[1].reward, 0.0);
  EXPECT_EQ(v[2].outcome, pb::OUTCOME_INFRA_ERROR) << v[2].detail;
  EXPECT_EQ(v[3].outcome, pb::OUTCOME_UNSCORED);  // not run
  EXPECT_THROW((*source)->VerifyAll(four, {" 2"}), std::invalid_argument);
}

// A custom dataset holds out its first eval_prompts rows for the base and final reward; one with
// no row left to train on is refused by name (its "held-out" reward was measured on the training
// prompts), and otherwise the two parts do not meet.
TEST(TaskSourceTest, TheHeldOutRowsAreNeverTrainedOnAndMustLeaveSomeToTrain) {
  const testing::ScopedTempDir dir("task-source");
  pb::JobSpec j = CustomJob(dir, "split");
  j.mutable_verifier()->add_command("/bin/true");
  j.mutable_dataset()->set_eval_prompts(64);
  auto refused = TaskSource::ForJob(j);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("has 1 examples"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("needs at least 2 examples"), std::string::npos);
  {
    std::ofstream f(j.dataset().jsonl_path());
    for (int i = 0; i < 5; ++i)
      f << R"({"id": "p)" << i << R"(", "prompt": "Q", "reference": "r"})"
        << "\n";
  }
  j.mutable_dataset()->set_eval_prompts(2);
  auto source = TaskSource::ForJob(j);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  ASSERT_EQ((*source)->eval_count(), 2u);
  for (uint64_t e = 0; e < 2; ++e)
    for (uint64_t t = 0; t < 6; ++t) EXPECT_NE((*source)->Eval(e).id, (*source)->Train(t).id);
}

// A dataset line that names a key twice is refused with where it is (the last "reference" was
// taken without a word); so is a dataset past kMaxDatasetBytes, before it is read.
TEST(TaskSourceTest, ADatasetWithAKeyTwiceOrTooLargeIsRefusedByName) {
  const testing::ScopedTempDir dir("task-source");
  const std::string data = dir.path() + "/twice.jsonl";
  std::ofstream(data) << R"({"id": "a", "prompt": "p", "reference": "r"})"
                      << "\n"
                      << R"({"id": "b", "prompt": "p", "reference": "r", "reference": "s"})"
                      << "\n";
  auto twice = ReadDataset(data);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(), data + ":2: JSONL line names key 'reference' twice");
  const std::string big = dir.path() + "/big.jsonl";
  {
    std::ofstream f(big);
    const std::string line =
        R"({"id": "x", "prompt": ")" + std::string(1 << 20, 'p') + R"(", "reference": "r"})" + "\n";
    for (size_t k = 0; k <= kMaxDatasetBytes >> 20; ++k) f << line;
  }
  auto large = ReadDataset(big);
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.status().message(),
            "dataset " + big +
                " is 65 MiB; a tenant's dataset may be at most 64 MiB (every stage "
                "holds it in memory): split it among tenants or trim it");
  // A file whose size stat does not tell (a /proc file says 0) is read only up to the limit: it
  // took serve to 1.5 GB in 5 s.
  auto endless = ReadDataset("/proc/self/pagemap");
  ASSERT_FALSE(endless.ok());
  EXPECT_EQ(endless.status().message(),
            "dataset /proc/self/pagemap holds more than 64 MiB; a tenant's dataset may be at most "
            "64 MiB (every stage holds it in memory): split it among tenants or trim it");
}

// A line nested deeper than a dataset needs is refused by the strict reader before anything
// copies it recursively: 200000 levels of metadata crashed serve (stack overflow) at submit.
TEST(TaskSourceTest, ADeeplyNestedDatasetLineIsRefusedNotACrash) {
  const testing::ScopedTempDir dir("task-source");
  const std::string data = dir.path() + "/deep.jsonl";
  {
    std::ofstream f(data);
    f << R"({"id": "a", "prompt": "p", "reference": "r"})"
      << "\n";
    f << R"({"id": "b", "prompt": "p", "reference": "r", "metadata": )" << std::string(200000, '[')
      << std::string(200000, ']') << "}\n";
  }
  auto deep = ReadDataset(data);
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message().rfind(
                data + ":2: JSONL line nests objects and lists more than 32 deep", 0),
            0u)
      << deep.status().message();
}

}  // namespace
}  // namespace marlaas::pipeline

// `marlaas tasks`: a built-in task's examples exported as JSONL are the examples a tenant with
// that dataset trains (or is evaluated) on, and they import back as a custom dataset.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "procs/common/task_source.h"
#include "proto/job_spec.h"
#include "tasks/task.h"
#include "tests/procs/run_marlaas.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::RunMarlaas;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(TasksCliTest, ExportedExamplesAreTheTenantsAndImportBack) {
  pb::JobSpec j;
  j.set_tenant("t");
  j.set_task("countdown");
  j.mutable_dataset()->set_seed(42);
  j.mutable_dataset()->set_eval_prompts(5);
  ApplyJobSpecDefaults(&j);
  auto source = pipeline::TaskSource::ForJob(j);
  ASSERT_TRUE(source.ok());
  const testing::ScopedTempDir dir("tasks-cli");
  for (const bool held_out : {false, true}) {
    const auto r = RunMarlaas(std::string("tasks --task countdown --n 5 --seed 42") +
                              (held_out ? " --held-out" : ""));
    ASSERT_EQ(r.status, 0) << r.output;
    const auto lines = Lines(r.output);
    ASSERT_EQ(lines.size(), 5u) << r.output;
    for (size_t i = 0; i < lines.size(); ++i) {
      auto e = tasks::FromJsonl(lines[i]);
      ASSERT_TRUE(e.ok()) << lines[i];
      const tasks::TaskExample want = held_out ? (*source)->Eval(i) : (*source)->Train(i);
      EXPECT_EQ(e->prompt, want.prompt);
      EXPECT_EQ(e->reference, want.reference);
      // The verifier of the task accepts the exported reference solution.
      auto task = *tasks::MakeTask("countdown");
      const std::string solution =
          nlohmann::json::parse(e->metadata_json)["solution"].get<std::string>();
      EXPECT_EQ(task->Verify(*e, " " + solution + "\n").reward, 1.0) << lines[i];
    }
    const std::string file = dir.path() + "/export" + (held_out ? "h" : "t") + ".jsonl";
    std::ofstream(file) << r.output;
    const auto check = RunMarlaas("tasks --check " + file);
    EXPECT_EQ(check.status, 0) << check.output;
    EXPECT_NE(check.output.find("5 examples"), std::string::npos) << check.output;
    // Too few for a custom job with the default held-out rows: said so.
    EXPECT_NE(check.output.find("set it below 5"), std::string::npos) << check.output;
  }
}

TEST(TasksCliTest, BadInputIsNamed) {
  const testing::ScopedTempDir dir("tasks-cli");
  const std::string file = dir.path() + "/bad.jsonl";
  std::ofstream(file) << R"({"id": "a", "prompt": "p", "reference": "r"})"
                      << "\n{oops\n";
  auto r = RunMarlaas("tasks --check " + file);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("bad.jsonl:2"), std::string::npos) << r.output;
  // With the parser's reason and place (every bad line said "is not a JSON object").
  EXPECT_NE(r.output.find("not valid JSON (column 2"), std::string::npos) << r.output;
  // A number past a double is a bad line too (it threw past the catch: serve's admission of
  // such a dataset aborted the service).
  std::ofstream(dir.path() + "/huge.jsonl")
      << R"({"id": "a", "prompt": "p", "reference": "r", "x": 1e400})"
      << "\n";
  r = RunMarlaas("tasks --check " + dir.path() + "/huge.jsonl");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("huge.jsonl:1"), std::string::npos) << r.output;
  std::ofstream(dir.path() + "/list.jsonl") << "[1, 2]\n";
  r = RunMarlaas("tasks --check " + dir.path() + "/list.jsonl");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("is a JSON array, not an object"), std::string::npos) << r.output;
  std::ofstream(dir.path() + "/empty.jsonl") << "\n";
  r = RunMarlaas("tasks --check " + dir.path() + "/empty.jsonl");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("empty.jsonl is empty"), std::string::npos) << r.output;
  // Read as a custom tenant's dataset is: a folder or a device is refused, not read (/dev/zero
  // was read until memory ran out).
  r = RunMarlaas("tasks --check " + dir.path());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("is a folder, not a file"), std::string::npos) << r.output;
  r = RunMarlaas("tasks --check /dev/zero");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("/dev/zero is not a regular file"), std::string::npos) << r.output;
  r = RunMarlaas("tasks --task chess");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("arithmetic countdown python_functions calculator_tool"),
            std::string::npos)
      << r.output;
  r = RunMarlaas("tasks --task arithmetic --n 0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--n"), std::string::npos) << r.output;
  // One row is no custom dataset (one held out, none to train on): it passed, with advice to set
  // eval_prompts below 1.
  const std::string one = dir.path() + "/one.jsonl";
  std::ofstream(one) << R"({"id": "a", "prompt": "p", "reference": "r"})"
                     << "\n";
  r = RunMarlaas("tasks --check " + one);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("a custom job needs at least 2 rows"), std::string::npos) << r.output;
  // --check with the options that make examples: one or the other (they were ignored).
  r = RunMarlaas("tasks --check " + file + " --n 5");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--check reads a file; --n is for making examples"), std::string::npos)
      << r.output;
  // More held-out examples than the stream has: said, not cut short without a word.
  r = RunMarlaas("tasks --task arithmetic --n 100001 --held-out");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("--held-out has 100000 examples at most; --n 100001 is more"),
            std::string::npos)
      << r.output.substr(0, 300);
}

}  // namespace
}  // namespace marlaas

// TaskSource: a tenant's examples and its verifier, as its job spec defines them. Built-in tasks
// generate examples from (dataset.seed, index, difficulty); held-out evaluation examples come
// from a separate stream (seed + 1000003) that training never sees. Task "custom" reads a JSONL
// dataset ({"id","prompt","reference","metadata"} per line): its first eval_prompts lines are the
// held-out set when the file has more lines than that, the rest are training prompts; its
// verifier is the tenant's command run in the sandbox. Const methods are thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "proto/marlaas.pb.h"
#include "sandbox/verdict.h"
#include "tasks/task.h"

namespace marlaas::pipeline {

// The examples of a JSONL dataset file, blank lines skipped. A file that is missing, not a
// regular file (a folder, a pipe, a device), larger than kMaxDatasetBytes (every stage holds it
// in memory), holds a line that is not an example or names a key twice (named as path:line), or
// holds none, is refused by name. What `submit` and `tasks --check` both read.
constexpr size_t kMaxDatasetBytes = size_t(64) << 20;
Result<std::vector<tasks::TaskExample>> ReadDataset(const std::string& path);

class TaskSource {
 public:
  static Result<std::unique_ptr<TaskSource>> ForJob(const pb::JobSpec& spec);

  // Training example `index`; any index is valid (datasets wrap around).
  tasks::TaskExample Train(uint64_t index) const;
  // Held-out example `index`, 0 <= index < eval_count().
  tasks::TaskExample Eval(uint64_t index) const;
  size_t eval_count() const;
  // Whether verifying runs untrusted code (in the sandbox).
  bool runs_untrusted_code() const;
  sandbox::Verdict Verify(const tasks::TaskExample& example, const std::string& completion) const;
  // completions[i] against *examples[i], at once where the task can (tasks::Task::VerifyAll). A
  // custom verifier runs once per completion and stops at an infrastructure failure: the rest
  // stay OUTCOME_UNSCORED.
  std::vector<sandbox::Verdict> VerifyAll(const std::vector<const tasks::TaskExample*>& examples,
                                          const std::vector<std::string>& completions) const;

 private:
  pb::JobSpec spec_;
  std::unique_ptr<tasks::Task> task_;     // built-in tasks
  std::vector<tasks::TaskExample> rows_;  // custom: the dataset
  size_t eval_rows_ = 0;                  // custom: rows [0, eval_rows_) are held out
};

}  // namespace marlaas::pipeline

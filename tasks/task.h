// Task: a built-in RL task — a deterministic example generator, a verifier and a writer of
// pretraining documents whose answers are only partly right (the gap RL must close). Examples
// round-trip through JSONL. Implementations are stateless; any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "sandbox/verdict.h"

namespace marlaas::tasks {

struct TaskExample {
  std::string id;             // "<task>-<seed>-<index>"
  std::string prompt;         // what the model sees
  std::string reference;      // task-specific: an answer, a target, hidden tests as JSON
  std::string metadata_json;  // task-specific extras ({} when none)
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // Example `index` of stream `seed` at difficulty 1..5.
  virtual TaskExample Example(uint64_t seed, uint64_t index, int difficulty) const = 0;
  // Scores a completion (the text the model generated after the prompt).
  virtual sandbox::Verdict Verify(const TaskExample& example,
                                  const std::string& completion) const = 0;
  // Scores completions[i] against *examples[i], all at once (a GRPO group, a held-out set): the
  // verdicts Verify gives one by one. Tasks that run code override it to share one sandbox run
  // (python_functions: sandbox/python_tests_verifier.h). Throws std::invalid_argument when the
  // sizes differ.
  virtual std::vector<sandbox::Verdict> VerifyAll(
      const std::vector<const TaskExample*>& examples,
      const std::vector<std::string>& completions) const;
  // A pretraining document for the example: the prompt and a right completion, or, with
  // correct == false, a plausible wrong one (varied by `salt`).
  virtual std::string CorpusDocument(const TaskExample& example, bool correct,
                                     uint64_t salt) const = 0;
};

// VerifyAll's precondition, for its implementations: throws std::invalid_argument when the sizes
// differ.
void CheckVerifyAllSizes(const std::vector<const TaskExample*>& examples,
                         const std::vector<std::string>& completions);

// "arithmetic" | "countdown" | "python_functions" | "calculator_tool"; kNotFound otherwise.
Result<std::unique_ptr<Task>> MakeTask(const std::string& name);
const std::vector<std::string>& BuiltinTaskNames();

std::string ToJsonl(const TaskExample& e);
Result<TaskExample> FromJsonl(const std::string& line);

// Documents for pretraining: examples 0..per_task-1 of every built-in task (difficulties 1-3),
// interleaved, each right with probability correct_rate.
std::vector<std::string> BuiltinCorpus(uint64_t seed, size_t per_task, double correct_rate);

// The corpus the built-in tiny base is pretrained on (`marlaas pretrain` and the service's
// default base): per_task examples of every built-in task, difficulties cycling 1,1,1,2 (the tiny
// model learns difficulty 1 in its few minutes; RL starts there), twice as many arithmetic
// (short) and calculator_tool (copying is learnt late) documents, each right with probability 0.9
// (python_functions 0.6, whose answers are otherwise learnt almost perfectly). Tuned so the base
// samples (temperature 1) some right and some wrong answers on difficulty-1 problems: GRPO
// groups with mixed rewards, and room for RL to gain.
std::vector<std::string> TinyBaseCorpus(uint64_t seed, size_t per_task = 10000);

}  // namespace marlaas::tasks

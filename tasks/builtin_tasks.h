// The built-in tasks. Prompts end with "A:"; completions answer on the same line.
//  - arithmetic: "Q: 23+48=\nA:" -> " 71"; verified by exact/numeric match.
//  - countdown: "Q: make 23 from 3 5 8 using each at most once with + - * ( )\nA:" -> " 3*5+8";
//    verified by parsing the expression, checking the numbers used, and evaluating it with the
//    safe calculator.
//  - python_functions: "Q: Write a one-line Python function f(x) that returns x times 7.\nA:" ->
//    " def f(x): return x * 7"; verified by hidden tests in the sandbox.
//  - calculator_tool: "Q: What is 347*29? ...\nA:" -> " <tool name=\"calc\">347*29</tool>
//    <result>10063</result> 10063"; the answer after the last </result> is checked.
#pragma once

#include "tasks/task.h"

namespace marlaas::tasks {

class ArithmeticTask : public Task {
 public:
  std::string name() const override { return "arithmetic"; }
  TaskExample Example(uint64_t seed, uint64_t index, int difficulty) const override;
  sandbox::Verdict Verify(const TaskExample& e, const std::string& completion) const override;
  std::string CorpusDocument(const TaskExample& e, bool correct, uint64_t salt) const override;
};

class CountdownTask : public Task {
 public:
  std::string name() const override { return "countdown"; }
  TaskExample Example(uint64_t seed, uint64_t index, int difficulty) const override;
  sandbox::Verdict Verify(const TaskExample& e, const std::string& completion) const override;
  std::string CorpusDocument(const TaskExample& e, bool correct, uint64_t salt) const override;
};

class PythonFunctionsTask : public Task {
 public:
  std::string name() const override { return "python_functions"; }
  TaskExample Example(uint64_t seed, uint64_t index, int difficulty) const override;
  sandbox::Verdict Verify(const TaskExample& e, const std::string& completion) const override;
  // One sandbox run for all the completions that are one-line defs.
  std::vector<sandbox::Verdict> VerifyAll(
      const std::vector<const TaskExample*>& examples,
      const std::vector<std::string>& completions) const override;
  std::string CorpusDocument(const TaskExample& e, bool correct, uint64_t salt) const override;
};

class CalculatorToolTask : public Task {
 public:
  std::string name() const override { return "calculator_tool"; }
  TaskExample Example(uint64_t seed, uint64_t index, int difficulty) const override;
  sandbox::Verdict Verify(const TaskExample& e, const std::string& completion) const override;
  std::string CorpusDocument(const TaskExample& e, bool correct, uint64_t salt) const override;
};

// Shared: verdict for a final answer against the reference (FORMAT_ERROR when empty).
sandbox::Verdict MatchFinalAnswer(const std::string& reference, const std::string& answer);
// A plausible wrong number near `value` (never equal to it).
int64_t WrongNear(int64_t value, uint64_t salt);

}  // namespace marlaas::tasks

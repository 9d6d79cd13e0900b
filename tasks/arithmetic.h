// The arithmetic task (first slice: the problem generator and the pretraining corpus; the
// verifier and JSONL import/export arrive with the sandbox/tasks work). A problem is
// "Q: 23+48=\nA:" and its answer " 71". Deterministic for (seed, index, difficulty).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace marlaas::tasks {

struct ArithmeticProblem {
  std::string prompt;  // "Q: 23+48=\nA:"
  std::string answer;  // " 71"
  int64_t value = 0;
};

// difficulty 1: a±b with a, b < 20; 2: < 100; 3: also a·b with b < 10; 4: a, b < 1000;
// 5: three operands.
ArithmeticProblem ArithmeticProblemAt(uint64_t seed, uint64_t index, int difficulty);

// Pretraining documents "prompt answer\n": a fraction `correct_rate` with the right answer, the
// rest with a plausible wrong one (off by 1-10, or a digit dropped), so a model trained on it
// answers some problems right and leaves reward for RL to gain.
std::vector<std::string> ArithmeticCorpus(uint64_t seed, size_t documents, double correct_rate);

}  // namespace marlaas::tasks

// Arithmetic problems for the arithmetic task (tasks/builtin_tasks.h): "Q: 23+48=\nA:" with the
// answer " 71". Deterministic for (seed, index, difficulty).
#pragma once

#include <cstdint>
#include <string>

namespace marlaas::tasks {

struct ArithmeticProblem {
  std::string prompt;  // "Q: 23+48=\nA:"
  std::string answer;  // " 71"
  int64_t value = 0;
};

// difficulty 1: a±b with single-digit a, b; 2: < 100; 3: also a·b with b < 10; 4: a, b < 1000;
// 5: three operands.
ArithmeticProblem ArithmeticProblemAt(uint64_t seed, uint64_t index, int difficulty);

}  // namespace marlaas::tasks

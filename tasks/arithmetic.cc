#include "tasks/arithmetic.h"

#include <random>

namespace marlaas::tasks {

ArithmeticProblem ArithmeticProblemAt(uint64_t seed, uint64_t index, int difficulty) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + index * 0xbf58476d1ce4e5b9ULL +
                      uint64_t(difficulty));
  const int64_t limit = difficulty <= 1 ? 10 : difficulty <= 3 ? 100 : 1000;
  auto operand = [&](int64_t lim) { return int64_t(rng() % uint64_t(lim)); };
  int64_t a = operand(limit), b = operand(limit);
  const int ops = difficulty >= 3 ? 3 : 2;
  const char op = "+-*"[rng() % uint64_t(ops)];
  if (op == '*') b = operand(10);
  int64_t value = op == '+' ? a + b : op == '-' ? a - b : a * b;
  std::string expr = std::to_string(a) + op + std::to_string(b);
  if (difficulty >= 5) {
    const int64_t c = operand(100);
    const bool plus = rng() % 2 == 0;
    expr += (plus ? "+" : "-") + std::to_string(c);
    value = plus ? value + c : value - c;
  }
  return {"Q: " + expr + "=\nA:", " " + std::to_string(value), value};
}

}  // namespace marlaas::tasks

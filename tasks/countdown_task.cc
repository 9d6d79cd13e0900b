#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "sandbox/answer_match.h"
#include "sandbox/calculator.h"
#include "tasks/builtin_tasks.h"

namespace marlaas::tasks {

using json = nlohmann::json;

// Difficulty 1: two numbers 1-10 with + -; 2: three numbers 1-25 with + - *; 3+: four. The
// numbers in the prompt; the target comes from a random expression over a subset of them, which
// is kept (metadata "solution") for corpus documents.
TaskExample CountdownTask::Example(uint64_t seed, uint64_t index, int difficulty) const {
  std::mt19937_64 rng(seed * 0x2545F4914F6CDD1DULL + index * 0x9E3779B97F4A7C15ULL + 17);
  const int count = difficulty <= 1 ? 2 : difficulty == 2 ? 3 : 4;
  std::vector<int> nums;
  for (int i = 0; i < count; ++i) nums.push_back(1 + int(rng() % (difficulty <= 1 ? 10 : 25)));
  std::vector<int> order = nums;
  std::shuffle(order.begin(), order.end(), rng);
  const int used = 2 + int(rng() % uint64_t(count - 1));  // 2..count numbers
  std::string expr = std::to_string(order[0]);
  int64_t value = order[0];
  for (int i = 1; i < used; ++i) {
    const char op = "+-*"[rng() % (difficulty <= 1 ? 2 : 3)];
    if (op == '*') {  // keep precedence simple: wrap what we have
      expr = (i > 1 ? "(" + expr + ")" : expr) + "*" + std::to_string(order[size_t(i)]);
      value *= order[size_t(i)];
    } else {
      expr += std::string(1, op) + std::to_string(order[size_t(i)]);
      value = op == '+' ? value + order[size_t(i)] : value - order[size_t(i)];
    }
  }
  std::string list;
  for (int n : nums) list += (list.empty() ? "" : " ") + std::to_string(n);
  TaskExample e;
  e.id = "countdown-" + std::to_string(seed) + "-" + std::to_string(index);
  e.prompt = "Q: make " + std::to_string(value) + " from " + list +
             " using each at most once with + - * ( )\nA:";
  e.reference = std::to_string(value);
  e.metadata_json = json{{"numbers", nums}, {"solution", expr}}.dump();
  return e;
}

sandbox::Verdict CountdownTask::Verify(const TaskExample& e, const std::string& completion) const {
  sandbox::Verdict v;
  const std::string expr = sandbox::ExtractFinalAnswer(completion);
  json meta = json::parse(e.metadata_json, nullptr, false);
  std::map<int64_t, int> available;
  for (const auto& n : meta["numbers"]) ++available[n.get<int64_t>()];
  // Every number in the expression must come from the list, each no more often than given.
  for (size_t i = 0; i < expr.size();) {
    const char c = expr[i];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < expr.size() && std::isdigit(static_cast<unsigned char>(expr[j]))) ++j;
      int64_t n = 0;
      const auto [end, ec] = std::from_chars(expr.data() + i, expr.data() + j, n);
      if (ec != std::errc() || end != expr.data() + j) {  // too long for any given number
        v.outcome = pb::OUTCOME_WRONG_ANSWER;
        v.detail = "uses a number that was not given";
        return v;
      }
      if (--available[n] < 0) {
        v.outcome = pb::OUTCOME_WRONG_ANSWER;
        v.detail = "uses " + std::to_string(n) + " more often than given";
        return v;
      }
      i = j;
    } else if (c == '*' && i + 1 < expr.size() && expr[i + 1] == '*') {
      v.outcome = pb::OUTCOME_FORMAT_ERROR;  // the calculator knows powers; the task does not
      v.detail = "'**' is not one of + - * ( )";
      return v;
    } else if (std::string("+-*() ").find(c) != std::string::npos) {
      ++i;
    } else {
      v.outcome = pb::OUTCOME_FORMAT_ERROR;
      v.detail = "unexpected '" + std::string(1, c) + "' in the expression";
      return v;
    }
  }
  auto value = sandbox::EvaluateExpression(expr);
  if (!value.ok()) {
    v.outcome = pb::OUTCOME_FORMAT_ERROR;
    v.detail = value.status().message();
    return v;
  }
  return MatchFinalAnswer(e.reference, *value);
}

std::string CountdownTask::CorpusDocument(const TaskExample& e, bool correct, uint64_t salt) const {
  json meta = json::parse(e.metadata_json);
  std::string expr = meta["solution"];
  if (!correct) {  // change one operator: same numbers, wrong value
    for (size_t i = salt % expr.size(), n = 0; n < expr.size(); ++n, i = (i + 1) % expr.size()) {
      if (expr[i] == '+' || expr[i] == '-') {
        expr[i] = expr[i] == '+' ? '-' : '+';
        break;
      }
      if (expr[i] == '*') {
        expr[i] = '+';
        break;
      }
    }
  }
  return e.prompt + " " + expr + "\n";
}

}  // namespace marlaas::tasks

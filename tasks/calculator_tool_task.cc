#include <nlohmann/json.hpp>
#include <random>

#include "sandbox/answer_match.h"
#include "sandbox/tool_syntax.h"
#include "tasks/builtin_tasks.h"

namespace marlaas::tasks {

// Products a small model cannot do in its head, so the calculator is worth calling: a 3-digit
// number times, at difficulty 1, a 2-digit one (4- and 5-digit results); at 2, one of 10-909
// (4 to 6 digits); from 3 on, a 3-digit one (5 and, mostly, 6 digits).
TaskExample CalculatorToolTask::Example(uint64_t seed, uint64_t index, int difficulty) const {
  std::mt19937_64 rng(seed * 0xA0761D6478BD642FULL + index * 0x9E3779B97F4A7C15ULL + 41);
  const int64_t a = 100 + int64_t(rng() % 900);
  const int64_t b = difficulty <= 1   ? 10 + int64_t(rng() % 90)
                    : difficulty == 2 ? 10 + int64_t(rng() % 900)
                                      : 100 + int64_t(rng() % 900);
  const std::string expr = std::to_string(a) + "*" + std::to_string(b);
  TaskExample e;
  e.id = "calculator_tool-" + std::to_string(seed) + "-" + std::to_string(index);
  e.prompt =
      "Q: What is " + expr + "? You may call " + sandbox::FormatToolCall("calc", "...") + ".\nA:";
  e.reference = std::to_string(a * b);
  e.metadata_json = nlohmann::json{{"expression", expr}}.dump();
  return e;
}

sandbox::Verdict CalculatorToolTask::Verify(const TaskExample& e,
                                            const std::string& completion) const {
  // The answer is what follows the last tool result (or the whole line without tool use).
  const size_t last = completion.rfind(sandbox::kToolResultEnd);
  const std::string tail =
      last == std::string::npos
          ? completion
          : completion.substr(last + std::char_traits<char>::length(sandbox::kToolResultEnd));
  return MatchFinalAnswer(e.reference, sandbox::ExtractFinalAnswer(tail));
}

std::string CalculatorToolTask::CorpusDocument(const TaskExample& e, bool correct,
                                               uint64_t salt) const {
  const std::string expr = nlohmann::json::parse(e.metadata_json)["expression"];
  const int64_t value = std::stoll(e.reference);
  const std::string answer = std::to_string(correct ? value : WrongNear(value, salt));
  return e.prompt + " " + sandbox::FormatToolCall("calc", expr) +
         sandbox::FormatToolResult(e.reference) + " " + answer + "\n";
}

}  // namespace marlaas::tasks

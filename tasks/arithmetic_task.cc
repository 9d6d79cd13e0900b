#include "sandbox/answer_match.h"
#include "tasks/arithmetic.h"
#include "tasks/builtin_tasks.h"

namespace marlaas::tasks {

sandbox::Verdict MatchFinalAnswer(const std::string& reference, const std::string& answer) {
  sandbox::Verdict v;
  if (answer.empty()) {
    v.outcome = pb::OUTCOME_FORMAT_ERROR;
    v.detail = "no answer";
    return v;
  }
  const bool right = sandbox::AnswersMatch(reference, answer);
  v.outcome = right ? pb::OUTCOME_OK : pb::OUTCOME_WRONG_ANSWER;
  v.reward = right ? 1.0 : 0.0;
  v.detail = "answered '" + answer.substr(0, 40) + "', expected '" + reference + "'";
  return v;
}

int64_t WrongNear(int64_t value, uint64_t salt) {
  const int64_t delta = int64_t(1 + salt % 10) * ((salt >> 8) % 2 ? 1 : -1);
  return value + delta;
}

TaskExample ArithmeticTask::Example(uint64_t seed, uint64_t index, int difficulty) const {
  const ArithmeticProblem p = ArithmeticProblemAt(seed, index, difficulty);
  return {"arithmetic-" + std::to_string(seed) + "-" + std::to_string(index), p.prompt,
          std::to_string(p.value), "{}"};
}

sandbox::Verdict ArithmeticTask::Verify(const TaskExample& e, const std::string& completion) const {
  return MatchFinalAnswer(e.reference, sandbox::ExtractFinalAnswer(completion));
}

std::string ArithmeticTask::CorpusDocument(const TaskExample& e, bool correct,
                                           uint64_t salt) const {
  const int64_t value = std::stoll(e.reference);
  return e.prompt + " " + std::to_string(correct ? value : WrongNear(value, salt)) + "\n";
}

}  // namespace marlaas::tasks

#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>

#include "tasks/builtin_tasks.h"
#include "tasks/task.h"

namespace marlaas::tasks {

using json = nlohmann::json;

const std::vector<std::string>& BuiltinTaskNames() {
  static const std::vector<std::string> kNames = {"arithmetic", "countdown", "python_functions",
                                                  "calculator_tool"};
  return kNames;
}

Result<std::unique_ptr<Task>> MakeTask(const std::string& name) {
  if (name == "arithmetic") return std::unique_ptr<Task>(new ArithmeticTask());
  if (name == "countdown") return std::unique_ptr<Task>(new CountdownTask());
  if (name == "python_functions") return std::unique_ptr<Task>(new PythonFunctionsTask());
  if (name == "calculator_tool") return std::unique_ptr<Task>(new CalculatorToolTask());
  return Status(StatusCode::kNotFound, "no built-in task '" + name + "'");
}

std::vector<sandbox::Verdict> Task::VerifyAll(const std::vector<const TaskExample*>& examples,
                                              const std::vector<std::string>& completions) const {
  CheckVerifyAllSizes(examples, completions);
  std::vector<sandbox::Verdict> out;
  out.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) out.push_back(Verify(*examples[i], completions[i]));
  return out;
}

void CheckVerifyAllSizes(const std::vector<const TaskExample*>& examples,
                         const std::vector<std::string>& completions) {
  if (examples.size() != completions.size()) {
    throw std::invalid_argument("VerifyAll: " + std::to_string(examples.size()) + " examples for " +
                                std::to_string(completions.size()) + " completions");
  }
}

std::string ToJsonl(const TaskExample& e) {
  json meta = json::parse(e.metadata_json.empty() ? "{}" : e.metadata_json, nullptr, false);
  return json{{"id", e.id}, {"prompt", e.prompt}, {"reference", e.reference}, {"metadata", meta}}
      .dump();
}

Result<TaskExample> FromJsonl(const std::string& line) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {  // a syntax error, or a number past a double (1e400)
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error ...":
    // where and what, for a line cut short, a stray \r or two objects on one line.
    const std::string what = e.what();
    const size_t at = what.find("column ");
    return Status(StatusCode::kInvalidArgument,
                  "JSONL line is not valid JSON (" +
                      (at == std::string::npos ? what : what.substr(at)).substr(0, 300) + ")");
  }
  if (!j.is_object()) {
    return Status(StatusCode::kInvalidArgument,
                  std::string("JSONL line is a JSON ") + j.type_name() + ", not an object");
  }
  for (const char* k : {"id", "prompt", "reference"}) {
    if (!j.contains(k) || !j[k].is_string()) {
      return Status(StatusCode::kInvalidArgument,
                    std::string("JSONL field '") + k + "' missing or not a string");
    }
  }
  if (j["prompt"].get_ref<const std::string&>().empty())
    return Status(StatusCode::kInvalidArgument, "JSONL field 'prompt' is empty");
  TaskExample e{j["id"], j["prompt"], j["reference"],
                j.contains("metadata") ? j["metadata"].dump() : "{}"};
  return e;
}

namespace {

// Documents for examples 0..per_task-1 of every built-in task, interleaved; task t contributes
// repeats(t) consecutive examples per round, example k at difficulty(k), right with probability
// correct_rate(t).
std::vector<std::string> MixedCorpus(uint64_t seed, size_t per_task,
                                     const std::function<int(uint64_t)>& difficulty,
                                     const std::function<double(const Task&)>& correct_rate,
                                     const std::function<uint64_t(const Task&)>& repeats) {
  std::vector<std::unique_ptr<Task>> tasks;
  for (const auto& n : BuiltinTaskNames()) tasks.push_back(std::move(*MakeTask(n)));
  std::mt19937_64 rng(seed ^ 0x5eedc0de);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<std::string> docs;
  for (size_t i = 0; i < per_task; ++i) {
    for (const auto& t : tasks) {
      const uint64_t n = repeats(*t);
      for (uint64_t r = 0; r < n; ++r) {
        const uint64_t index = i * n + r;
        const TaskExample e = t->Example(seed, index, difficulty(index));
        const bool correct = coin(rng) < correct_rate(*t);
        docs.push_back(t->CorpusDocument(e, correct, rng()));
      }
    }
  }
  return docs;
}

}  // namespace

std::vector<std::string> BuiltinCorpus(uint64_t seed, size_t per_task, double correct_rate) {
  return MixedCorpus(
      seed, per_task, [](uint64_t i) { return 1 + int(i % 3); },
      [&](const Task&) { return correct_rate; }, [](const Task&) { return uint64_t(1); });
}

std::vector<std::string> TinyBaseCorpus(uint64_t seed, size_t per_task) {
  static constexpr int kDifficulties[] = {1, 1, 1, 2};
  return MixedCorpus(
      seed, per_task, [](uint64_t i) { return kDifficulties[i % 4]; },
      [](const Task& t) { return t.name() == "python_functions" ? 0.6 : 0.9; },
      // Short arithmetic documents, and the calculator's copying (learnt late), get twice as many.
      [](const Task& t) {
        return uint64_t(t.name() == "arithmetic" || t.name() == "calculator_tool" ? 2 : 1);
      });
}

}  // namespace marlaas::tasks

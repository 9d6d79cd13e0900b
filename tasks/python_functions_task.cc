#include <nlohmann/json.hpp>
#include <random>

#include "sandbox/python_tests_verifier.h"
#include "tasks/builtin_tasks.h"

namespace marlaas::tasks {
namespace {

using json = nlohmann::json;

// A family of one-line functions with a constant k: the spec text, the reference body, and the
// expected value (as JSON) for an argument.
struct Family {
  const char* spec;  // %d is k
  const char* param;
  const char* body;  // %d is k
  json (*expect)(const json& arg, int k);
  bool string_arg;
};

const Family kFamilies[] = {
    {"returns x times %d", "x", "x * %d",
     [](const json& a, int k) { return json(a.get<int64_t>() * k); }, false},
    {"returns x plus %d", "x", "x + %d",
     [](const json& a, int k) { return json(a.get<int64_t>() + k); }, false},
    {"returns the remainder of x divided by %d", "x", "x %% %d",
     [](const json& a, int k) { return json(((a.get<int64_t>() % k) + k) % k); }, false},
    {"returns True if x is divisible by %d, else False", "x", "x %% %d == 0",
     [](const json& a, int k) { return json(a.get<int64_t>() % k == 0); }, false},
    {"returns the string s repeated %d times", "s", "s * %d",
     [](const json& a, int k) {
       std::string out;
       for (int i = 0; i < k; ++i) out += a.get<std::string>();
       return json(out);
     },
     true},
    {"returns the list of the first %d multiples of x, starting with x", "x",
     "[x * i for i in range(1, %d + 1)]",
     [](const json& a, int k) {
       json out = json::array();
       for (int i = 1; i <= k; ++i) out.push_back(a.get<int64_t>() * i);
       return out;
     },
     false},
};

std::string Format(const char* fmt, int k) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), fmt, k);
  return buf;
}

}  // namespace

TaskExample PythonFunctionsTask::Example(uint64_t seed, uint64_t index, int difficulty) const {
  std::mt19937_64 rng(seed * 0xD1B54A32D192ED03ULL + index * 0x9E3779B97F4A7C15ULL + 29);
  const size_t families = difficulty <= 1 ? 2 : difficulty == 2 ? 4 : std::size(kFamilies);
  const size_t f = rng() % families;
  const Family& fam = kFamilies[f];
  const int k = 2 + int(rng() % 8);
  json tests = json::array();
  for (int i = 0; i < 4; ++i) {
    json arg = fam.string_arg ? json(std::string(1, char('a' + rng() % 26)) + "b")
                              : json(int64_t(rng() % 50) - 10);
    tests.push_back({json::array({arg}), fam.expect(arg, k)});
  }
  TaskExample e;
  e.id = "python_functions-" + std::to_string(seed) + "-" + std::to_string(index);
  e.prompt = "Q: Write a one-line Python function f(" + std::string(fam.param) + ") that " +
             Format(fam.spec, k) + ".\nA:";
  e.reference = json{{"function", "f"}, {"tests", tests}}.dump();
  e.metadata_json =
      json{{"solution", "def f(" + std::string(fam.param) + "): return " + Format(fam.body, k)},
           {"wrong", "def f(" + std::string(fam.param) + "): return " + Format(fam.body, k + 1)}}
          .dump();
  return e;
}

sandbox::Verdict PythonFunctionsTask::Verify(const TaskExample& e,
                                             const std::string& completion) const {
  return VerifyAll({&e}, {completion})[0];
}

std::vector<sandbox::Verdict> PythonFunctionsTask::VerifyAll(
    const std::vector<const TaskExample*>& examples,
    const std::vector<std::string>& completions) const {
  CheckVerifyAllSizes(examples, completions);
  std::vector<sandbox::Verdict> out(completions.size());
  std::vector<sandbox::PythonCandidate> candidates;
  std::vector<size_t> where;  // candidates[k] is completion where[k]
  for (size_t i = 0; i < completions.size(); ++i) {
    // The candidate is the completion's first line (a one-line function).
    std::string code = completions[i].substr(0, completions[i].find('\n'));
    while (!code.empty() && code.front() == ' ') code.erase(0, 1);
    if (code.rfind("def ", 0) != 0) {
      out[i].outcome = pb::OUTCOME_FORMAT_ERROR;
      out[i].detail = "the answer is not a one-line def";
      continue;
    }
    const json ref = json::parse(examples[i]->reference);
    sandbox::PythonCandidate c;
    c.source = code + "\n";
    c.function_name = ref["function"];
    for (const auto& t : ref["tests"]) c.tests.push_back({t[0].dump(), t[1].dump()});
    candidates.push_back(std::move(c));
    where.push_back(i);
  }
  if (candidates.empty()) return out;
  sandbox::SandboxLimits limits;
  limits.wall_timeout_ms = 2000;
  std::vector<sandbox::Verdict> judged = sandbox::VerifyPythonFunctions(candidates, limits);
  for (size_t k = 0; k < where.size(); ++k) out[where[k]] = std::move(judged[k]);
  return out;
}

std::string PythonFunctionsTask::CorpusDocument(const TaskExample& e, bool correct,
                                                uint64_t) const {
  json meta = json::parse(e.metadata_json);
  std::string code = meta["solution"];
  if (!correct) {
    // The wrong operation with the right constant (x * 7 -> x + 7, x + 7 -> x * 7, x % 7 ->
    // x // 7): a wrong answer that still copies the prompt's number, so the documents do not
    // teach the tiny base to get the number wrong (which slows its learning to copy it).
    for (const auto& [from, to] :
         {std::pair<std::string, std::string>{" * ", " + "}, {" + ", " * "}, {" % ", " // "}}) {
      const size_t at = code.find(from);
      if (at != std::string::npos) {
        code.replace(at, from.size(), to);
        break;
      }
    }
  }
  return e.prompt + " " + code + "\n";
}

}  // namespace marlaas::tasks

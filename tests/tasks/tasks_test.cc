// Built-in tasks: deterministic generators, verifiers that accept right and reject wrong
// completions, JSONL round trips, and the corpus's documented share of right answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "sandbox/calculator.h"
#include "tasks/task.h"

namespace marlaas::tasks {
namespace {

using json = nlohmann::json;

// The completion part of a corpus document (what follows the prompt).
std::string CompletionOf(const TaskExample& e, const std::string& doc) {
  return doc.substr(e.prompt.size());
}

class TaskTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TaskTest, GeneratorIsDeterministicAndVaried) {
  auto task = *MakeTask(GetParam());
  std::set<std::string> prompts;
  for (uint64_t i = 0; i < 40; ++i) {
    const TaskExample a = task->Example(7, i, 2), b = task->Example(7, i, 2);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.reference, b.reference);
    EXPECT_EQ(a.prompt.substr(a.prompt.size() - 2), "A:");
    prompts.insert(a.prompt);
  }
  EXPECT_GT(prompts.size(), 15u);
  EXPECT_NE(task->Example(7, 0, 2).prompt, task->Example(8, 0, 2).prompt);
}

TEST_P(TaskTest, RightCompletionsScoreOneAndWrongOnesZero) {
  auto task = *MakeTask(GetParam());
  int wrong_scored_zero = 0;
  const int n = 25;
  for (uint64_t i = 0; i < n; ++i) {
    const TaskExample e = task->Example(3, i, 1 + int(i % 3));
    const auto right = task->Verify(e, CompletionOf(e, task->CorpusDocument(e, true, i)));
    EXPECT_EQ(right.outcome, pb::OUTCOME_OK) << e.prompt << " -> " << right.detail;
    EXPECT_EQ(right.reward, 1.0);
    const auto wrong = task->Verify(e, CompletionOf(e, task->CorpusDocument(e, false, i * 7 + 1)));
    EXPECT_TRUE(wrong.scored()) << wrong.detail;
    wrong_scored_zero += wrong.reward == 0.0;
  }
  // Countdown's "wrong" operator swap can land on the target by chance; rarely.
  EXPECT_GE(wrong_scored_zero, n - 2);
  const TaskExample e = task->Example(3, 0, 1);
  EXPECT_EQ(task->Verify(e, "").outcome, pb::OUTCOME_FORMAT_ERROR);
  EXPECT_EQ(task->Verify(e, "").reward, 0.0);
}

// Verifying many completions at once (a python_functions task shares one sandbox run) gives the
// verdicts Verify gives one by one: right and wrong answers to different examples, an empty one.
TEST_P(TaskTest, VerifyingAllAtOnceEqualsOneByOne) {
  auto task = *MakeTask(GetParam());
  std::vector<TaskExample> examples;
  std::vector<std::string> completions;
  for (uint64_t i = 0; i < 6; ++i) {
    examples.push_back(task->Example(5, i, 1));
    const std::string doc = task->CorpusDocument(examples.back(), i % 2 == 0, i);
    completions.push_back(i == 3 ? "" : CompletionOf(examples.back(), doc));
  }
  std::vector<const TaskExample*> ptrs;
  for (const TaskExample& e : examples) ptrs.push_back(&e);
  const std::vector<sandbox::Verdict> all = task->VerifyAll(ptrs, completions);
  ASSERT_EQ(all.size(), examples.size());
  int right = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const sandbox::Verdict one = task->Verify(examples[i], completions[i]);
    EXPECT_EQ(all[i].outcome, one.outcome) << i << ": " << all[i].detail << " / " << one.detail;
    EXPECT_EQ(all[i].reward, one.reward) << i;
    EXPECT_EQ(all[i].detail, one.detail) << i;
    right += all[i].reward == 1.0;
  }
  EXPECT_EQ(all[3].outcome, pb::OUTCOME_FORMAT_ERROR);
  EXPECT_EQ(right, 3);  // the right documents: 0, 2 and 4
  EXPECT_TRUE(task->VerifyAll({}, {}).empty());
  EXPECT_THROW(task->VerifyAll(ptrs, {"x"}), std::invalid_argument);
}

TEST_P(TaskTest, ExamplesRoundTripThroughJsonl) {
  auto task = *MakeTask(GetParam());
  const TaskExample e = task->Example(11, 5, 3);
  auto back = FromJsonl(ToJsonl(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, e.id);
  EXPECT_EQ(back->prompt, e.prompt);
  EXPECT_EQ(back->reference, e.reference);
  const std::string doc = task->CorpusDocument(*back, true, 1);
  EXPECT_EQ(task->Verify(*back, CompletionOf(*back, doc)).reward, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Builtin, TaskTest, ::testing::ValuesIn(BuiltinTaskNames()),
                         [](const auto& info) { return info.param; });

// The arithmetic reference is the value of the prompt's expression, worked out here by the
// calculator tool's evaluator (sandbox/calculator.h, not the generator's own arithmetic): the
// right-answer check above only replays the reference, so a generator that computed a wrong
// value would pass it.
TEST(TasksTest, ArithmeticReferencesAreTheValueOfThePromptsExpression) {
  auto task = *MakeTask("arithmetic");
  for (int difficulty = 1; difficulty <= 5; ++difficulty) {
    int products = 0, three_operands = 0;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      for (uint64_t i = 0; i < 50; ++i) {
        const TaskExample e = task->Example(seed, i, difficulty);
        const std::string head = "Q: ", tail = "=\nA:";
        ASSERT_GT(e.prompt.size(), head.size() + tail.size()) << e.prompt;
        ASSERT_EQ(e.prompt.substr(0, head.size()), head) << e.prompt;
        ASSERT_EQ(e.prompt.substr(e.prompt.size() - tail.size()), tail) << e.prompt;
        const std::string expr =
            e.prompt.substr(head.size(), e.prompt.size() - head.size() - tail.size());
        // Only digits and + - *: the evaluator's grammar has nothing else for them to mean.
        ASSERT_EQ(expr.find_first_not_of("0123456789+-*"), std::string::npos) << expr;
        products += expr.find('*') != std::string::npos;
        three_operands +=
            expr.find_first_of("+-*", expr.find_first_of("+-*") + 1) != std::string::npos;
        const auto value = sandbox::EvaluateExpression(expr);
        ASSERT_TRUE(value.ok()) << expr << ": " << value.status().ToString();
        EXPECT_EQ(*value, e.reference) << "seed " << seed << " index " << i << ": " << expr;
      }
    }
    // The operators each difficulty promises are there to be checked.
    if (difficulty >= 3) {
      EXPECT_GT(products, 0) << difficulty;
    } else {
      EXPECT_EQ(products, 0) << difficulty;
    }
    EXPECT_EQ(three_operands, difficulty == 5 ? 1000 : 0) << difficulty;
  }
}

TEST(TasksTest, UnknownTasksAndBadJsonlAreRefused) {
  EXPECT_EQ(MakeTask("chess").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(FromJsonl("{\"id\": 1}").ok());
  EXPECT_NE(FromJsonl("{\"id\": \"a\", \"prompt\": \"p\"}").status().message().find("reference"),
            std::string::npos);
  // Nothing to generate from: the rollout would have no tokens to start a completion with.
  EXPECT_NE(FromJsonl(R"({"id": "a", "prompt": "", "reference": "r"})")
                .status()
                .message()
                .find("'prompt' is empty"),
            std::string::npos);
}

// The corpus's share of right answers is what the caller asked for (documented as 50% for the
// tiny base): it is what leaves reward for RL to gain.
TEST(TasksTest, CorpusHasTheRequestedShareOfRightAnswers) {
  const auto docs = BuiltinCorpus(5, 40, 0.5);
  ASSERT_EQ(docs.size(), 160u);
  int right = 0, checked = 0;
  for (size_t i = 0; i < docs.size(); ++i) {
    const std::string& name = BuiltinTaskNames()[i % 4];
    if (name == "python_functions") continue;  // sandboxed: covered above, slower
    auto task = *MakeTask(name);
    const TaskExample e = task->Example(5, i / 4, 1 + int((i / 4) % 3));
    ASSERT_EQ(docs[i].substr(0, e.prompt.size()), e.prompt);
    right += task->Verify(e, docs[i].substr(e.prompt.size())).reward == 1.0;
    ++checked;
  }
  EXPECT_NEAR(double(right) / checked, 0.5, 0.15);
}

// What a model may write is hostile input to the verifier: a number too long for any integer
// type, or a power the task does not allow, is a verdict, never an exception.
TEST(TasksTest, CountdownJudgesHostileExpressionsWithoutThrowing) {
  auto task = *MakeTask("countdown");
  const TaskExample e = task->Example(3, 0, 1);
  sandbox::Verdict v;
  ASSERT_NO_THROW(v = task->Verify(e, " 99999999999999999999999999+1\n"));
  EXPECT_EQ(v.outcome, pb::OUTCOME_WRONG_ANSWER) << v.detail;
  EXPECT_EQ(v.reward, 0.0);
  const json meta = json::parse(e.metadata_json);
  const std::string a = std::to_string(meta["numbers"][0].get<int64_t>()),
                    b = std::to_string(meta["numbers"][1].get<int64_t>());
  v = task->Verify(e, " " + a + "**" + b + "\n");
  EXPECT_EQ(v.outcome, pb::OUTCOME_FORMAT_ERROR) << v.detail;
  EXPECT_NE(v.detail.find("**"), std::string::npos);
}

// The tiny base's corpus has the right-answer rates the README documents: 0.9 for arithmetic,
// countdown and calculator_tool, 0.6 for python_functions (checked by its sandboxed verifier).
TEST(TasksTest, TinyBaseCorpusHasTheDocumentedRates) {
  const size_t per_task = 60;
  const auto docs = TinyBaseCorpus(9, per_task);
  std::map<std::string, std::pair<int, int>> right_of;  // task -> (right, total)
  for (const std::string& doc : docs) {
    for (const std::string& name : BuiltinTaskNames()) {
      auto task = *MakeTask(name);
      // The document's example: the one of this task whose prompt it starts with.
      for (uint64_t index = 0; index < 2 * per_task; ++index) {
        static constexpr int kDifficulties[] = {1, 1, 1, 2};
        const TaskExample e = task->Example(9, index, kDifficulties[index % 4]);
        if (doc.compare(0, e.prompt.size(), e.prompt) != 0) continue;
        auto& [right, total] = right_of[name];
        right += task->Verify(e, doc.substr(e.prompt.size())).reward == 1.0;
        ++total;
        break;
      }
    }
  }
  const std::map<std::string, double> documented = {
      {"arithmetic", 0.9}, {"countdown", 0.9}, {"calculator_tool", 0.9}, {"python_functions", 0.6}};
  for (const auto& [name, rate] : documented) {
    const auto [right, total] = right_of[name];
    ASSERT_GE(total, int(per_task)) << name;
    EXPECT_NEAR(double(right) / total, rate, 0.1) << name << ": " << right << "/" << total;
  }
}

// The calculator's difficulty sets the second factor's size: 2 digits, 10-909, then 3 digits.
TEST(TasksTest, CalculatorDifficultySetsTheFactorSizes) {
  auto task = *MakeTask("calculator_tool");
  const std::pair<int64_t, int64_t> range[] = {{10, 99}, {10, 909}, {100, 999}, {100, 999}};
  for (int difficulty = 1; difficulty <= 4; ++difficulty) {
    int64_t lo = INT64_MAX, hi = 0;
    for (uint64_t i = 0; i < 400; ++i) {
      const TaskExample e = task->Example(3, i, difficulty);
      const std::string expr = json::parse(e.metadata_json)["expression"];
      const int64_t a = std::stoll(expr.substr(0, expr.find('*')));
      const int64_t b = std::stoll(expr.substr(expr.find('*') + 1));
      EXPECT_GE(a, 100);
      EXPECT_LE(a, 999);
      EXPECT_EQ(std::to_string(a * b), e.reference);
      lo = std::min(lo, b);
      hi = std::max(hi, b);
    }
    const auto [want_lo, want_hi] = range[difficulty - 1];
    EXPECT_GE(lo, want_lo) << difficulty;
    EXPECT_LE(hi, want_hi) << difficulty;
    EXPECT_LT(lo, want_lo + (want_hi - want_lo) / 10) << difficulty;  // the range is used
    EXPECT_GT(hi, want_hi - (want_hi - want_lo) / 10) << difficulty;
  }
}

// The tiny base is pretrained on TinyBaseCorpus: a change to any task's generator at the
// difficulties it uses (1 and 2), or to its documents, re-rolls every task's base reward and
// the demo's tuning with it. This pins the corpus; change the value only on purpose.
TEST(TasksTest, TinyBaseCorpusIsUnchanged) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over the documents, each with its terminator
  for (const std::string& doc : TinyBaseCorpus(1, 50)) {
    for (char c : doc + '\0') h = (h ^ uint8_t(c)) * 1099511628211ULL;
  }
  EXPECT_EQ(h, 13932196006914451498ULL)
      << "TinyBaseCorpus changed: the tiny base and the demo's tuning change too";
}

}  // namespace
}  // namespace marlaas::tasks

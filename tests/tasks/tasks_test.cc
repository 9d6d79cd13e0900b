// Built-in tasks: deterministic generators, verifiers that accept right and reject wrong
// completions, JSONL round trips, and the corpus's documented share of right answers.
#include <gtest/gtest.h>

#include <set>

#include "tasks/task.h"

namespace marlaas::tasks {
namespace {

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

TEST(TasksTest, UnknownTasksAndBadJsonlAreRefused) {
  EXPECT_EQ(MakeTask("chess").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(FromJsonl("{\"id\": 1}").ok());
  EXPECT_NE(FromJsonl("{\"id\": \"a\", \"prompt\": \"p\"}").status().message().find("reference"),
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

}  // namespace
}  // namespace marlaas::tasks

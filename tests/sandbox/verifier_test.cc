// Verifiers: answer normalisation and the Python-tests verifier's outcomes.
#include <gtest/gtest.h>

#include "sandbox/answer_match.h"
#include "sandbox/python_tests_verifier.h"

namespace marlaas::sandbox {
namespace {

TEST(AnswerMatchTest, NormalisationFollowsTheDocumentedRules) {
  EXPECT_EQ(NormalizeAnswer("  42 "), "42");
  EXPECT_EQ(NormalizeAnswer("+7.50"), "7.5");
  EXPECT_EQ(NormalizeAnswer("7.0"), "7");
  EXPECT_EQ(NormalizeAnswer("-0.0"), "0");
  EXPECT_EQ(NormalizeAnswer("a   b\tc"), "a b c");
  EXPECT_TRUE(AnswersMatch("42", " +42.000"));
  EXPECT_TRUE(AnswersMatch("2", "6/3"));
  EXPECT_TRUE(AnswersMatch("0.5", "1/2"));
  EXPECT_FALSE(AnswersMatch("1000", "1,000"));
  EXPECT_FALSE(AnswersMatch("42", "43"));
  EXPECT_FALSE(AnswersMatch("1", "1/0"));
  EXPECT_FALSE(AnswersMatch("", ""));
  EXPECT_TRUE(AnswersMatch("Paris", " Paris "));
  EXPECT_EQ(ExtractFinalAnswer(" 71\nQ: next"), "71");
  EXPECT_EQ(ExtractFinalAnswer("so 3+4 is seven. A: 7\n"), "7");
}

PythonTestsSpec SquareSpec() {
  PythonTestsSpec s;
  s.function_name = "f";
  s.tests = {{"[3]", "9"}, {"[-2]", "4"}, {"[0]", "0"}};
  return s;
}

TEST(PythonTestsVerifierTest, CorrectWrongAndRaisingCandidates) {
  auto ok = VerifyPythonFunction("def f(x):\n    print('noise')\n    return x * x\n", SquareSpec());
  EXPECT_EQ(ok.outcome, pb::OUTCOME_OK) << ok.detail;
  EXPECT_EQ(ok.reward, 1.0);
  auto wrong = VerifyPythonFunction("def f(x):\n    return x + x\n", SquareSpec());
  EXPECT_EQ(wrong.outcome, pb::OUTCOME_WRONG_ANSWER) << wrong.detail;
  EXPECT_EQ(wrong.reward, 0.0);
  auto raises = VerifyPythonFunction("def f(x):\n    raise ValueError()\n", SquareSpec());
  EXPECT_EQ(raises.outcome, pb::OUTCOME_RUNTIME_ERROR);
  EXPECT_NE(raises.detail.find("ValueError"), std::string::npos);
  auto syntax = VerifyPythonFunction("def f(x) return x\n", SquareSpec());
  EXPECT_EQ(syntax.outcome, pb::OUTCOME_RUNTIME_ERROR);
  EXPECT_NE(syntax.detail.find("SyntaxError"), std::string::npos);
}

// A candidate that raises never passes, also when the expected output is None.
TEST(PythonTestsVerifierTest, RaisingNeverPassesEvenWhenNoneIsExpected) {
  PythonTestsSpec s;
  s.function_name = "g";
  s.tests = {{"[]", "null"}};
  EXPECT_EQ(VerifyPythonFunction("def g():\n    return None\n", s).outcome, pb::OUTCOME_OK);
  EXPECT_EQ(VerifyPythonFunction("def g():\n    raise SystemExit(0)\n", s).outcome,
            pb::OUTCOME_RUNTIME_ERROR);
  EXPECT_EQ(VerifyPythonFunction("import os\ndef g():\n    os._exit(0)\n", s).outcome,
            pb::OUTCOME_RUNTIME_ERROR);
}

TEST(PythonTestsVerifierTest, ResourceOutcomesAreDistinguished) {
  PythonTestsSpec s = SquareSpec();
  s.limits.wall_timeout_ms = 500;
  EXPECT_EQ(VerifyPythonFunction("def f(x):\n    while True: pass\n", s).outcome,
            pb::OUTCOME_TIMEOUT);
  EXPECT_EQ(VerifyPythonFunction("def f(x):\n    return bytearray(1 << 40)\n", s).outcome,
            pb::OUTCOME_MEMORY_LIMIT);
}

TEST(PythonTestsVerifierTest, BrokenHiddenTestsAreAnInfrastructureErrorNotAReward) {
  PythonTestsSpec s = SquareSpec();
  s.tests.push_back({"[1", "1"});
  const Verdict v = VerifyPythonFunction("def f(x):\n    return x * x\n", s);
  EXPECT_EQ(v.outcome, pb::OUTCOME_INFRA_ERROR);
  EXPECT_FALSE(v.scored());
}

}  // namespace
}  // namespace marlaas::sandbox

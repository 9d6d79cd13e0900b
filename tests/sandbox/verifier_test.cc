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
  EXPECT_GT(ok.cpu_ms, 0.0);  // its sandbox run's CPU time
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

// Results travel as JSON written by the harness's own encoder: quotes, control characters,
// non-ASCII and non-BMP text, tuples, nested dicts, floats and booleans must survive it.
TEST(PythonTestsVerifierTest, ValuesOfEveryJsonShapeRoundTrip) {
  PythonTestsSpec s;
  s.function_name = "h";
  s.tests = {{R"(["x\"y\n", {"k": [1, null]}])",
              R"(["x\"y\n", "é🙂\\", [1, 2.5], {"k": [1, null], "n": true}, false])"}};
  const std::string candidate =
      "def h(s, d):\n"
      "    d = dict(d)\n    d['n'] = True\n"
      "    return [s, 'é🙂\\\\', (1, 2.5), d, False]\n";
  auto v = VerifyPythonFunction(candidate, s);
  EXPECT_EQ(v.outcome, pb::OUTCOME_OK) << v.detail;
  // Types are compared as JSON: True is not 1.
  s.tests = {{"[]", "1"}};
  EXPECT_EQ(VerifyPythonFunction("def h():\n    return True\n", s).outcome,
            pb::OUTCOME_WRONG_ANSWER);
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

#include "sandbox/command_verifier.h"

namespace marlaas::sandbox {
namespace {

CommandVerifierSpec PyVerifier(const std::string& script) {
  CommandVerifierSpec s;
  s.argv = {"/usr/bin/python3", "-I", "-S", "verify.py"};
  s.files = {{"verify.py", script}};
  s.limits.wall_timeout_ms = 1000;
  return s;
}

TEST(CommandVerifierTest, RewardComesFromTheTenantsProgram) {
  auto spec = PyVerifier(
      "import json, sys\nd = json.load(sys.stdin)\n"
      "ok = d['completion'].strip() == str(d['metadata']['answer'])\n"
      "print(json.dumps({'reward': 1.0 if ok else 0.25}))\n");
  auto right = RunCommandVerifier(spec, "2+2?", " 4\n", R"({"answer": 4})");
  EXPECT_EQ(right.outcome, pb::OUTCOME_OK) << right.detail;
  EXPECT_EQ(right.reward, 1.0);
  EXPECT_GT(right.cpu_ms, 0.0);
  auto wrong = RunCommandVerifier(spec, "2+2?", " 5", R"({"answer": 4})");
  EXPECT_EQ(wrong.outcome, pb::OUTCOME_OK);
  EXPECT_EQ(wrong.reward, 0.25);
}

// A verifier that breaks its contract is a verifier error, retried, and never a reward.
TEST(CommandVerifierTest, BrokenVerifiersAreErrorsNotRewards) {
  const char* broken[] = {
      "raise RuntimeError('boom')", "print('not json')",          "print('{\"reward\": 1.5}')",
      "print('{\"score\": 1}')",    "import time\ntime.sleep(5)",
  };
  for (const char* script : broken) {
    auto v = RunCommandVerifier(PyVerifier(script), "p", "c", "{}");
    EXPECT_EQ(v.outcome, pb::OUTCOME_INFRA_ERROR) << script;
    EXPECT_FALSE(v.scored());
    EXPECT_EQ(v.attempts, 2) << script;
    EXPECT_NE(v.detail.find("verifier error"), std::string::npos);
  }
}

}  // namespace
}  // namespace marlaas::sandbox

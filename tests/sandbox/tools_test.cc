// The calculator and the tool-call syntax.
#include <gtest/gtest.h>

#include "sandbox/calculator.h"
#include "sandbox/tool_syntax.h"

namespace marlaas::sandbox {
namespace {

std::string Eval(const std::string& e) {
  auto r = EvaluateExpression(e);
  return r.ok() ? *r : "ERR: " + r.status().message();
}

TEST(CalculatorTest, EvaluatesArithmeticWithPrecedence) {
  EXPECT_EQ(Eval("(3+4)*5"), "35");
  EXPECT_EQ(Eval("2 + 3 * 4 - 6 / 4"), "12.5");
  EXPECT_EQ(Eval("-2 ** 2"), "-4");  // ** binds tighter than unary minus, as in Python
  EXPECT_EQ(Eval("2 ** 3 ** 2"), "512");
  EXPECT_EQ(Eval("17 % 5"), "2");
  EXPECT_EQ(Eval("--3"), "3");
  EXPECT_EQ(Eval("1/3"), "0.3333333333");
  EXPECT_EQ(Eval("0.1 + 0.2"), "0.3");
}

TEST(CalculatorTest, RefusesAnythingButArithmetic) {
  EXPECT_NE(Eval("1/0").find("division by zero"), std::string::npos);
  EXPECT_NE(Eval("__import__('os')").find("unexpected '_'"), std::string::npos);
  EXPECT_NE(Eval("2 ** 100000").find("exponent"), std::string::npos);
  EXPECT_NE(Eval("10 ** 20").find("out of range"), std::string::npos);
  EXPECT_NE(Eval(std::string(40, '(') + "1" + std::string(40, ')')).find("nested"),
            std::string::npos);
  EXPECT_NE(Eval(std::string(300, '1')).find("longer than"), std::string::npos);
  EXPECT_NE(Eval("(1+2").find("missing ')'"), std::string::npos);
  EXPECT_NE(Eval("1.2.3").find("bad number"), std::string::npos);
  EXPECT_NE(Eval("").find("ends early"), std::string::npos);
}

TEST(ToolSyntaxTest, FindsCompleteCallsAndFormatsResults) {
  const std::string text = "Let me compute. <tool name=\"calc\">(3+4)*5</tool> then";
  auto call = FindToolCall(text);
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->name, "calc");
  EXPECT_EQ(call->input, "(3+4)*5");
  EXPECT_EQ(text.substr(call->begin, call->end - call->begin), FormatToolCall("calc", "(3+4)*5"));
  EXPECT_FALSE(FindToolCall("<tool name=\"calc\">1+").has_value());  // incomplete
  EXPECT_FALSE(FindToolCall(text, call->end).has_value());
  EXPECT_EQ(FormatToolResult("35"), "<result>35</result>");
  auto out = ExecuteTool(*call, {});
  EXPECT_EQ(out.outcome, pb::OUTCOME_OK);
  EXPECT_EQ(out.output, "35");
}

TEST(ToolSyntaxTest, TrailingCallIsTheLastCallOnlyWhenTheTextEndsWithIt) {
  const std::string two =
      "<tool name=\"calc\">1+2</tool><result>3</result> <tool name=\"calc\">3*4</tool>";
  auto last = TrailingToolCall(two);
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->input, "3*4");
  EXPECT_EQ(last->end, two.size());
  EXPECT_FALSE(TrailingToolCall(two + " 12").has_value());  // something after the call
  EXPECT_FALSE(TrailingToolCall("no call here</tool>").has_value());
}

TEST(ToolSyntaxTest, PythonToolRunsSandboxedAndUnknownToolsAreFormatErrors) {
  SandboxLimits l;
  auto py = ExecuteTool({"python", "print(sum(range(10)))", 0, 0}, l);
  EXPECT_EQ(py.outcome, pb::OUTCOME_OK);
  EXPECT_EQ(py.output, "45\n");
  EXPECT_GT(py.cpu_ms, 0.0);
  auto bad = ExecuteTool({"python", "raise ValueError('x')", 0, 0}, l);
  EXPECT_EQ(bad.outcome, pb::OUTCOME_RUNTIME_ERROR);
  EXPECT_NE(bad.output.find("ValueError"), std::string::npos);
  auto big = ExecuteTool({"python", "print('y' * 5000)", 0, 0}, l, 100);
  EXPECT_TRUE(big.truncated);
  EXPECT_EQ(big.output.size(), 100u);
  EXPECT_EQ(ExecuteTool({"shell", "ls", 0, 0}, l).outcome, pb::OUTCOME_FORMAT_ERROR);
}

// Without explicit limits the python tool runs under ToolLimits(), tighter than a verifier's
// defaults: 1.5 s of sleep (fine for a verifier's 2 s) is a timeout, 8 KiB of output (fine under
// a verifier's 64 KiB) is over the tool's 4 KiB, and a crash is a runtime error, not a timeout.
TEST(ToolSyntaxTest, ThePythonToolHasItsOwnTighterLimits) {
  EXPECT_EQ(ExecuteTool({"python", "import time\ntime.sleep(1.5)", 0, 0}).outcome,
            pb::OUTCOME_TIMEOUT);
  EXPECT_EQ(ExecuteTool({"python", "print('z' * 8192)", 0, 0}).outcome, pb::OUTCOME_OUTPUT_LIMIT);
  EXPECT_EQ(ExecuteTool({"python", "import ctypes\nctypes.string_at(0)", 0, 0}).outcome,
            pb::OUTCOME_RUNTIME_ERROR);
  EXPECT_EQ(ExecuteTool({"python", "print('fits')", 0, 0}).outcome, pb::OUTCOME_OK);
}

}  // namespace
}  // namespace marlaas::sandbox

// The calculator tool: a safe evaluator for arithmetic expressions (no code is ever executed).
// Grammar: numbers (integers, decimals), + - * / % (integer operands), ** (integer exponent
// 0..64), unary + and -, parentheses. Limits: 256 characters, nesting depth 32, |value| <= 1e15.
// Results print as integers when integral, else with up to 10 significant digits. Pure.
#pragma once

#include <string>

#include "base/status.h"

namespace marlaas::sandbox {

Result<std::string> EvaluateExpression(const std::string& expression);

}  // namespace marlaas::sandbox

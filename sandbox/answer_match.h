// Exact and numeric answer checks with a documented normalisation:
//  - surrounding whitespace is dropped and inner runs of whitespace become one space;
//  - a number may carry a leading '+', trailing zeros after a decimal point ("7.0", "7.50"),
//    thousands separators are NOT accepted ("1,000" is not 1000), and a simple fraction "a/b"
//    with integers a, b (b != 0) stands for its value;
//  - two answers match when both are numbers within 1e-9 relative (or 1e-12 absolute) of each
//    other, otherwise when their normalised texts are equal.
// Pure functions.
#pragma once

#include <optional>
#include <string>

namespace marlaas::sandbox {

std::string NormalizeAnswer(const std::string& text);
// The numeric value of a normalised answer, if it is a number or a simple fraction.
std::optional<double> NumericValue(const std::string& normalized);
bool AnswersMatch(const std::string& expected, const std::string& candidate);

// The final answer in a completion: the text after the last "A:" if any, up to the end of that
// line, else the first line; then normalised. Empty when there is none.
std::string ExtractFinalAnswer(const std::string& completion);

}  // namespace marlaas::sandbox

#include "sandbox/answer_match.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace marlaas::sandbox {
namespace {

// [+|-]digits[.digits] exactly.
bool ParseDecimal(const std::string& s, double* out) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  const size_t digits_start = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  bool any = i > digits_start;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t frac = i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    any = any || i > frac;
  }
  if (!any || i != s.size()) return false;
  *out = std::strtod(s.c_str(), nullptr);
  return std::isfinite(*out);
}

bool IsInteger(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

}  // namespace

std::string NormalizeAnswer(const std::string& text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  double v;
  if (ParseDecimal(out, &v)) {  // canonical number text: no '+', no trailing zeros
    if (out[0] == '+') out.erase(0, 1);
    if (out.find('.') != std::string::npos) {
      while (out.back() == '0') out.pop_back();
      if (out.back() == '.') out.pop_back();
    }
    if (out == "-0") out = "0";
  }
  return out;
}

std::optional<double> NumericValue(const std::string& s) {
  double v;
  if (ParseDecimal(s, &v)) return v;
  const size_t slash = s.find('/');
  if (slash != std::string::npos) {
    const std::string a = s.substr(0, slash), b = s.substr(slash + 1);
    if (IsInteger(a) && IsInteger(b)) {
      const double den = std::strtod(b.c_str(), nullptr);
      if (den != 0) return std::strtod(a.c_str(), nullptr) / den;
    }
  }
  return std::nullopt;
}

bool AnswersMatch(const std::string& expected, const std::string& candidate) {
  const std::string e = NormalizeAnswer(expected), c = NormalizeAnswer(candidate);
  const auto ev = NumericValue(e), cv = NumericValue(c);
  if (ev && cv) {
    const double diff = std::fabs(*ev - *cv);
    return diff <= 1e-12 || diff <= 1e-9 * std::max(std::fabs(*ev), std::fabs(*cv));
  }
  return !e.empty() && e == c;
}

std::string ExtractFinalAnswer(const std::string& completion) {
  size_t start = 0;
  const size_t a = completion.rfind("A:");
  if (a != std::string::npos) start = a + 2;
  const size_t end = completion.find('\n', start);
  return NormalizeAnswer(
      completion.substr(start, end == std::string::npos ? std::string::npos : end - start));
}

}  // namespace marlaas::sandbox

#include "sandbox/calculator.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace marlaas::sandbox {
namespace {

constexpr size_t kMaxLength = 256;
constexpr int kMaxDepth = 32;
constexpr double kMaxMagnitude = 1e15;

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  Status Parse(double* out) {
    MARLAAS_RETURN_IF_ERROR(Sum(out, 0));
    Skip();
    if (pos_ != s_.size()) return Error("unexpected '" + std::string(1, s_[pos_]) + "'");
    return Status::Ok();
  }

 private:
  Status Error(const std::string& what) const {
    return Status(StatusCode::kInvalidArgument, what + " at position " + std::to_string(pos_));
  }
  void Skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(const char* tok) {
    Skip();
    const size_t n = std::char_traits<char>::length(tok);
    if (s_.compare(pos_, n, tok) != 0) return false;
    // "*" must not swallow the first half of "**".
    if (n == 1 && tok[0] == '*' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '*') return false;
    pos_ += n;
    return true;
  }
  Status Check(double v) const {
    if (!std::isfinite(v) || std::fabs(v) > kMaxMagnitude) return Error("result out of range");
    return Status::Ok();
  }

  Status Sum(double* out, int depth) {
    MARLAAS_RETURN_IF_ERROR(Product(out, depth));
    for (;;) {
      double rhs;
      if (Eat("+")) {
        MARLAAS_RETURN_IF_ERROR(Product(&rhs, depth));
        *out += rhs;
      } else if (Eat("-")) {
        MARLAAS_RETURN_IF_ERROR(Product(&rhs, depth));
        *out -= rhs;
      } else {
        return Status::Ok();
      }
      MARLAAS_RETURN_IF_ERROR(Check(*out));
    }
  }

  Status Product(double* out, int depth) {
    MARLAAS_RETURN_IF_ERROR(Unary(out, depth));
    for (;;) {
      double rhs;
      if (Eat("*")) {
        MARLAAS_RETURN_IF_ERROR(Unary(&rhs, depth));
        *out *= rhs;
      } else if (Eat("/")) {
        MARLAAS_RETURN_IF_ERROR(Unary(&rhs, depth));
        if (rhs == 0) return Error("division by zero");
        *out /= rhs;
      } else if (Eat("%")) {
        MARLAAS_RETURN_IF_ERROR(Unary(&rhs, depth));
        if (rhs == 0) return Error("modulo by zero");
        if (*out != std::floor(*out) || rhs != std::floor(rhs)) return Error("% needs integers");
        *out = std::fmod(*out, rhs);
      } else {
        return Status::Ok();
      }
      MARLAAS_RETURN_IF_ERROR(Check(*out));
    }
  }

  Status Unary(double* out, int depth) {
    if (Eat("-")) {
      MARLAAS_RETURN_IF_ERROR(Unary(out, depth + 1));
      *out = -*out;
      return Status::Ok();
    }
    if (Eat("+")) return Unary(out, depth + 1);
    return Power(out, depth);
  }

  Status Power(double* out, int depth) {
    MARLAAS_RETURN_IF_ERROR(Atom(out, depth));
    if (Eat("**")) {
      double exp;
      MARLAAS_RETURN_IF_ERROR(Unary(&exp, depth + 1));  // right-associative
      if (exp != std::floor(exp) || exp < 0 || exp > 64)
        return Error("exponent must be an integer in [0, 64]");
      *out = std::pow(*out, exp);
      MARLAAS_RETURN_IF_ERROR(Check(*out));
    }
    return Status::Ok();
  }

  Status Atom(double* out, int depth) {
    if (depth > kMaxDepth) return Error("expression nested too deeply");
    Skip();
    if (Eat("(")) {
      MARLAAS_RETURN_IF_ERROR(Sum(out, depth + 1));
      if (!Eat(")")) return Error("missing ')'");
      return Status::Ok();
    }
    const size_t start = pos_;
    while (pos_ < s_.size() &&
           (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.'))
      ++pos_;
    if (pos_ == start)
      return pos_ < s_.size() ? Error("unexpected '" + std::string(1, s_[pos_]) + "'")
                              : Error("expression ends early");
    const std::string num = s_.substr(start, pos_ - start);
    if (num.find('.') != num.rfind('.') || num == ".") return Error("bad number '" + num + "'");
    *out = std::strtod(num.c_str(), nullptr);
    return Check(*out);
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

Result<std::string> EvaluateExpression(const std::string& expression) {
  if (expression.size() > kMaxLength) {
    return Status(StatusCode::kInvalidArgument,
                  "expression longer than " + std::to_string(kMaxLength) + " characters");
  }
  double v = 0;
  MARLAAS_RETURN_IF_ERROR(Parser(expression).Parse(&v));
  char buf[64];
  if (v == std::floor(v)) {
    std::snprintf(buf, sizeof(buf), "%.0f", v == 0 ? 0.0 : v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.10g", v);
  }
  return std::string(buf);
}

}  // namespace marlaas::sandbox

#include "model/pretokenizer.h"

#include "model/unicode/tables.h"

namespace marlaas::model {
namespace {

using unicode::DecodeUtf8;
using unicode::IsLetter;
using unicode::IsNumber;
using unicode::IsWhitespace;

constexpr const char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char kQwen2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A cursor over code points of the text.
struct Text {
  std::string_view s;
  uint32_t At(size_t i) const { return i < s.size() ? DecodeUtf8(s, i).cp : 0; }
  size_t Next(size_t i) const { return i + DecodeUtf8(s, i).bytes; }
  bool End(size_t i) const { return i >= s.size(); }
};

bool IsPunct(uint32_t cp) { return !IsWhitespace(cp) && !IsLetter(cp) && !IsNumber(cp); }
bool IsNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

char Lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

// Each Match* returns the end of its alternative's match at `i`, or `i` when it does not match.
size_t MatchContraction(const Text& t, size_t i, bool ignore_case) {
  if (t.s[i] != '\'') return i;
  static const char* const kSuffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  for (const char* suf : kSuffixes) {
    size_t j = i + 1, k = 0;
    for (; suf[k] != '\0' && j < t.s.size(); ++j, ++k) {
      const char c = ignore_case ? Lower(t.s[j]) : t.s[j];
      if (c != suf[k]) break;
    }
    if (suf[k] == '\0') return j;
  }
  return i;
}

size_t LetterRun(const Text& t, size_t i) {
  while (!t.End(i) && IsLetter(t.At(i))) i = t.Next(i);
  return i;
}

size_t MatchLetters(const Text& t, size_t i, bool any_prefix) {
  const uint32_t c = t.At(i);
  const bool prefix = any_prefix ? (!IsNewline(c) && !IsLetter(c) && !IsNumber(c)) : c == ' ';
  if (prefix) {  // the optional prefix is greedy: try with it first
    const size_t j = t.Next(i);
    if (!t.End(j) && IsLetter(t.At(j))) return LetterRun(t, j);
  }
  return IsLetter(c) ? LetterRun(t, i) : i;
}

size_t MatchDigits(const Text& t, size_t i, int max_digits) {
  if (max_digits == 0) {  // ` ?\p{N}+`
    size_t j = t.At(i) == ' ' ? i + 1 : i;
    if (t.End(j) || !IsNumber(t.At(j))) return i;
    while (!t.End(j) && IsNumber(t.At(j))) j = t.Next(j);
    return j;
  }
  size_t j = i;
  for (int n = 0; n < max_digits && !t.End(j) && IsNumber(t.At(j)); ++n) j = t.Next(j);
  return j;
}

size_t MatchPunct(const Text& t, size_t i, bool take_newlines) {
  size_t j = t.At(i) == ' ' ? i + 1 : i;
  if (t.End(j) || !IsPunct(t.At(j))) return i;
  while (!t.End(j) && IsPunct(t.At(j))) j = t.Next(j);
  if (take_newlines) {
    while (!t.End(j) && IsNewline(t.At(j))) j = t.Next(j);
  }
  return j;
}

// `\s*[\r\n]+`: up to and including the last newline of the whitespace run at i.
size_t MatchNewlines(const Text& t, size_t i) {
  size_t j = i, end = i;
  while (!t.End(j) && IsWhitespace(t.At(j))) {
    const size_t next = t.Next(j);
    if (IsNewline(t.At(j))) end = next;
    j = next;
  }
  return end;
}

// `\s+(?!\S)` then `\s+`: the whole run when it ends the text or is one character long; else
// the run without its last character (which then starts the next piece with a letter etc.).
size_t MatchSpaces(const Text& t, size_t i) {
  if (t.End(i) || !IsWhitespace(t.At(i))) return i;
  size_t j = i, last = i;
  while (!t.End(j) && IsWhitespace(t.At(j))) {
    last = j;
    j = t.Next(j);
  }
  if (t.End(j) || last == i) return j;
  return last;
}

}  // namespace

PretokenizerRules Gpt2Rules() { return PretokenizerRules{}; }

Result<PretokenizerRules> RulesForPattern(const std::string& pattern) {
  if (pattern == kGpt2) return Gpt2Rules();
  PretokenizerRules r;
  r.contractions_ignore_case = true;
  r.letters_take_any_prefix = true;
  r.punct_takes_newlines = true;
  r.newline_runs = true;
  if (pattern == kLlama3) {
    r.max_digits = 3;
    return r;
  }
  if (pattern == kQwen2) {
    r.max_digits = 1;
    return r;
  }
  return Status(
      StatusCode::kInvalidArgument,
      "pre-tokenizer pattern is not one we implement (GPT-2, Llama-3, Qwen2): " + pattern);
}

std::vector<std::string_view> Pretokenize(std::string_view text, const PretokenizerRules& r) {
  std::vector<std::string_view> out;
  const Text t{text};
  size_t i = 0;
  while (i < text.size()) {
    size_t end = MatchContraction(t, i, r.contractions_ignore_case);
    if (end == i) end = MatchLetters(t, i, r.letters_take_any_prefix);
    if (end == i) end = MatchDigits(t, i, r.max_digits);
    if (end == i) end = MatchPunct(t, i, r.punct_takes_newlines);
    if (end == i && r.newline_runs) end = MatchNewlines(t, i);
    if (end == i) end = MatchSpaces(t, i);
    if (end == i) end = t.Next(i);  // unreachable with these patterns; never loop forever
    out.push_back(text.substr(i, end - i));
    i = end;
  }
  return out;
}

}  // namespace marlaas::model

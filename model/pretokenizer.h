// The regex pre-tokenizers of byte-level BPE tokenizers, matched by hand: the patterns that
// GPT-2, Llama-3 and Qwen2 put in tokenizer.json are recognised by their exact text and split
// with the same leftmost-first alternation and greedy semantics a regex engine applies. Any other
// pattern is refused by name rather than approximated. Invalid UTF-8 bytes count as punctuation.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace marlaas::model {

struct PretokenizerRules {
  bool contractions_ignore_case = false;  // (?i:'s|'t|...) (Llama-3, Qwen2) vs 's|'t|... (GPT-2)
  // Letter runs: GPT-2 allows one leading space (` ?\p{L}+`); Llama-3/Qwen2 one leading
  // character that is not \r, \n, a letter or a number (`[^\r\n\p{L}\p{N}]?\p{L}+`).
  bool letters_take_any_prefix = false;
  int max_digits = 0;                 // \p{N}{1,k}; 0 = unlimited with an optional space (GPT-2)
  bool punct_takes_newlines = false;  // ` ?[^\s\p{L}\p{N}]+[\r\n]*` vs without [\r\n]*
  bool newline_runs = false;          // the `\s*[\r\n]+` alternative
};

// The rules for a pattern string from tokenizer.json, or kInvalidArgument naming it.
Result<PretokenizerRules> RulesForPattern(const std::string& pattern);
// The GPT-2 pattern (ByteLevel with use_regex = true).
PretokenizerRules Gpt2Rules();

// Splits `text` into consecutive pieces (their concatenation is `text`).
std::vector<std::string_view> Pretokenize(std::string_view text, const PretokenizerRules& rules);

}  // namespace marlaas::model

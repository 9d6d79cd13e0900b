// Greedy exact-match evaluation of a checkpoint: for each (prompt, answer), does the model's
// greedy continuation, cut at the first newline or end-of-text, equal the answer? Used to report
// what a freshly pretrained base model gets right. No LibTorch in this header.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace marlaas::model {

// The greedy completion of each prompt, cut after the first newline or end-of-text (the cut
// token excluded), at most max_new_tokens tokens.
Result<std::vector<std::string>> GreedyCompletions(const std::string& model_dir,
                                                   const std::vector<std::string>& prompts,
                                                   int max_new_tokens);

// Fraction of pairs answered exactly, generating at most max_new_tokens per prompt.
Result<double> GreedyExactMatch(const std::string& model_dir,
                                const std::vector<std::pair<std::string, std::string>>& pairs,
                                int max_new_tokens = 12);

}  // namespace marlaas::model

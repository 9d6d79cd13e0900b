// Group-relative advantages (GRPO): for one prompt's group of G completions with rewards r_i,
// A_i = r_i - mean(r), optionally divided by (std(r) + 1e-6) with the unbiased (G-1) std. A group
// whose rewards are all equal carries no learning signal: its advantages are 0 and it is marked
// degenerate, to be counted and skipped rather than trained on. Pure functions.
#pragma once

#include <vector>

namespace marlaas::rl {

struct GroupAdvantages {
  std::vector<float> advantages;
  bool degenerate = false;  // all rewards equal (or fewer than two)
  float mean = 0, std = 0;
};

GroupAdvantages ComputeAdvantages(const std::vector<float>& rewards, bool normalize_std);

}  // namespace marlaas::rl

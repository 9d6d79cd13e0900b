#include "rl/advantages.h"

#include <cmath>

namespace marlaas::rl {

GroupAdvantages ComputeAdvantages(const std::vector<float>& rewards, bool normalize_std) {
  GroupAdvantages g;
  g.advantages.assign(rewards.size(), 0.0f);
  const size_t n = rewards.size();
  if (n < 2) {
    g.degenerate = true;
    return g;
  }
  double mean = 0;
  for (float r : rewards) mean += r;
  mean /= double(n);
  double var = 0;
  bool all_equal = true;
  for (float r : rewards) {
    var += (r - mean) * (r - mean);
    all_equal = all_equal && r == rewards[0];
  }
  g.mean = float(mean);
  g.std = float(std::sqrt(var / double(n - 1)));
  if (all_equal) {
    g.degenerate = true;
    return g;
  }
  for (size_t i = 0; i < n; ++i) {
    double a = rewards[i] - mean;
    if (normalize_std) a /= (double(g.std) + 1e-6);
    g.advantages[i] = float(a);
  }
  return g;
}

}  // namespace marlaas::rl

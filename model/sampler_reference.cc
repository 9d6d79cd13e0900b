#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/sampling_ops.h"
#include "model/sampler.h"

namespace marlaas::model::reference {

// The definition SampleToken must match token for token: the same weights (the kernel's; it is
// checked against its own reference in kernels_test), every candidate sorted, then cut.
Sampled SampleToken(const float* logits, int32_t vocab, const SamplingParams& p, SamplerRng* rng) {
  const double inv_t = p.greedy ? 1.0 : 1.0 / double(p.temperature);
  std::vector<float> prob(static_cast<size_t>(vocab));
  const kernels::SamplingWeights w =
      kernels::ComputeSamplingWeights(logits, vocab, float(inv_t), prob.data());
  const double m = w.max, sum = w.sum, log_z = std::log(sum);
  auto logprob = [&](int32_t v) { return float((logits[v] - m) * inv_t - log_z); };
  if (p.greedy) return {w.argmax, logprob(w.argmax)};

  // Candidate set after top-k and top-p, in descending probability (ties by token id, so the
  // order — and the sample — is deterministic). Without a cut, every token in id order and the
  // weights' sum as their mass.
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const bool truncate = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f;
  size_t keep = order.size();
  double mass = sum;
  if (truncate) {
    auto by_prob = [&](int32_t a, int32_t b) { return ProbabilityOrder(prob.data(), a, b); };
    std::sort(order.begin(), order.end(), by_prob);
    if (p.top_k > 0) keep = std::min(keep, size_t(p.top_k));
    if (p.top_p < 1.0f) {
      double cum = 0;
      for (size_t i = 0; i < keep; ++i) {
        cum += prob[size_t(order[i])] / sum;
        if (cum >= double(p.top_p)) {
          keep = i + 1;
          break;
        }
      }
    }
    mass = 0;
    for (size_t i = 0; i < keep; ++i) mass += prob[size_t(order[i])];
  }
  const int32_t t = DrawToken(prob.data(), order.data(), keep, rng->Uniform() * mass);
  return {t, logprob(t)};
}

}  // namespace marlaas::model::reference

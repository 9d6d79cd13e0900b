#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/sampling_ops.h"

namespace marlaas::model {
namespace {

// How many tokens the cut keeps, given that `order` holds the n most probable tokens (in any
// order), or 0 when that takes more than n: top_k keeps at most `limit`, top_p the fewest whose
// probability reaches it (summed in ProbabilityOrder, as the reference does); they end up sorted
// at the front of `order`. Sorts in rounds: each selects the next tokens from the unsorted rest
// (nth_element) and sorts only those, which leaves the prefix a full sort would give (the order
// is strict and total). Each round at least doubles the sorted prefix and takes at least as many
// tokens as the mass still missing needs (no unsorted token is more probable than the last
// sorted one).
size_t CutWithin(const float* prob, double sum, const SamplingParams& p, size_t limit,
                 std::vector<int32_t>* order) {
  auto by_prob = [prob](int32_t a, int32_t b) { return ProbabilityOrder(prob, a, b); };
  auto at = [order](size_t i) { return order->begin() + std::ptrdiff_t(i); };
  const size_t n = order->size();
  if (p.top_p >= 1.0f) {  // top-k alone: one selection and one sort
    if (n < limit) return 0;
    if (limit < n) std::nth_element(at(0), at(limit), order->end(), by_prob);
    std::sort(at(0), at(limit), by_prob);
    return limit;
  }
  const size_t end = std::min(limit, n);
  double cum = 0;
  size_t sorted = 0;
  for (size_t next = std::min(end, size_t(64)); sorted < end;) {
    if (next < n) std::nth_element(at(sorted), at(next), order->end(), by_prob);
    std::sort(at(sorted), at(next), by_prob);
    for (; sorted < next; ++sorted) {
      cum += prob[(*order)[sorted]] / sum;
      if (cum >= double(p.top_p)) return sorted + 1;
    }
    const double last = prob[(*order)[sorted - 1]] / sum;
    const double more = (double(p.top_p) - cum) / std::max(last, 1e-300);
    const double want = std::max(double(2 * sorted), double(sorted) + more);
    next = want >= double(end) ? end : size_t(want);
  }
  return n >= limit ? limit : 0;
}

// The top-k/top-p cut: its tokens, most probable first, in order[0, keep); returns keep. A token
// far below the most probable one (whose weight is 1: e^0) cannot be in a cut that the tokens
// above it already fill, so the candidates are first those of weight at least 1e-3, then 1e-6,
// then every token: a language model's cut is sorted out of a few hundred tokens, not the whole
// vocabulary. Every token left out ranks below every candidate, so a cut that the candidates
// hold is the top of the full order: the reference's.
size_t Cut(const float* prob, double sum, const SamplingParams& p, int32_t vocab,
           std::vector<int32_t>* order) {
  const size_t limit = p.top_k > 0 && p.top_k < vocab ? size_t(p.top_k) : size_t(vocab);
  for (double floor : {1e-3, 1e-6, 0.0}) {
    order->clear();
    for (int32_t v = 0; v < vocab; ++v) {
      if (floor == 0.0 || prob[v] >= floor) order->push_back(v);  // NaNs only with the last
    }
    if (const size_t keep = CutWithin(prob, sum, p, limit, order); keep > 0) return keep;
  }
  return limit;  // not reached: with every token a candidate, CutWithin decides
}

}  // namespace

int32_t DrawToken(const float* w, const int32_t* order, size_t n, double u) {
  auto walk = [&](auto token_at) {
    int32_t last = token_at(n - 1);
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = token_at(i);
      if (!(w[t] > 0)) continue;
      u -= double(w[t]);
      if (u <= 0) return t;
      last = t;
    }
    return last;
  };
  if (order == nullptr) return walk([](size_t i) { return int32_t(i); });
  return walk([order](size_t i) { return order[i]; });
}

Sampled SampleToken(const float* logits, int32_t vocab, const SamplingParams& p, SamplerRng* rng) {
  const double inv_t = p.greedy ? 1.0 : 1.0 / double(p.temperature);
  // Per-thread scratch: a 152k vocabulary's weights are 0.6 MB, not allocated per token.
  thread_local std::vector<float> prob_scratch;
  thread_local std::vector<int32_t> order;
  prob_scratch.resize(size_t(vocab));
  float* prob = prob_scratch.data();
  const kernels::SamplingWeights w =
      kernels::ComputeSamplingWeights(logits, vocab, float(inv_t), prob);
  const double m = w.max, sum = w.sum, log_z = std::log(sum);
  auto logprob = [&](int32_t v) { return float((logits[v] - m) * inv_t - log_z); };
  if (p.greedy) return {w.argmax, logprob(w.argmax)};

  const bool truncate = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f;
  if (!truncate) {  // every token, in id order
    const int32_t t = DrawToken(prob, nullptr, size_t(vocab), rng->Uniform() * sum);
    return {t, logprob(t)};
  }
  order.reserve(size_t(vocab));
  const size_t keep = Cut(prob, sum, p, vocab, &order);
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += prob[order[i]];
  const int32_t t = DrawToken(prob, order.data(), keep, rng->Uniform() * mass);
  return {t, logprob(t)};
}

}  // namespace marlaas::model

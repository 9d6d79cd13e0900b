// Sampling one token per row from logits, each row with its own parameters and its own random
// stream, so what a sequence samples never depends on which other sequences share its batch.
//
// Behaviour log-prob (what the trainer's importance ratio divides by): the log-probability of
// the sampled token under softmax(logits / temperature) over the whole vocabulary, i.e. the
// temperature-scaled policy before top-k/top-p truncation (kernels/logprob_ops.h computes the
// same function). With top_k = 0 and top_p = 1 (the defaults) it is the distribution sampled
// from, to the float rounding of the weights below. Greedy rows record the log-prob at
// temperature 1.
//
// The draw uses the weights of kernels/sampling_ops.h (float, e^((x − max)/T), vectorised): a
// token more than 86.6 below the most probable one after the temperature (a -inf logit
// included) has weight 0 and is never drawn; the log-prob itself is computed from the logit in
// double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

namespace marlaas::model {

struct SamplingParams {
  float temperature = 1.0f;  // > 0
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // 0: off
  bool greedy = false;       // argmax (evaluation)
};

// A row's random stream: a 64-bit generator seeded per sequence.
class SamplerRng {
 public:
  explicit SamplerRng(uint64_t seed) : gen_(seed) {}
  double Uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(gen_); }

 private:
  std::mt19937_64 gen_;
};

struct Sampled {
  int32_t token;
  float logprob;  // behaviour log-prob, as defined above
};

// Samples from one row of `vocab` logits. Top-k/top-p candidates are the most probable tokens,
// ties by token id; only as many as the cut needs are sorted (a full sort of a 152k vocabulary
// cost tens of milliseconds per token), so the result is token for token
// reference::SampleToken's. A NaN logit ranks below every number and leaves the row's weights'
// sum NaN: the pick is then a well-defined token with a NaN log-prob, never undefined behaviour.
Sampled SampleToken(const float* logits, int32_t vocab, const SamplingParams& params,
                    SamplerRng* rng);

// The draw: walks n tokens (ids order[i], or i when order is null) with weights w, subtracting
// each positive weight from u (a uniform draw times their total) and returning the token at which
// u reaches 0. A token of weight 0 or NaN is never returned while any has a positive weight; when
// rounding leaves u above 0 after the last token, the last of positive weight is returned; with
// no positive weight at all, the last token. n >= 1.
int32_t DrawToken(const float* w, const int32_t* order, size_t n, double u);

// The candidates' order: more probable first, ties (and NaNs, which rank last) by token id.
inline bool ProbabilityOrder(const float* prob, int32_t a, int32_t b) {
  const float pa = prob[a] == prob[a] ? prob[a] : -1.0f;
  const float pb = prob[b] == prob[b] ? prob[b] : -1.0f;
  return pa != pb ? pa > pb : a < b;
}

namespace reference {
// The plain definition: the same weights, every token sorted by ProbabilityOrder, then cut (tests
// and benchmarks).
Sampled SampleToken(const float* logits, int32_t vocab, const SamplingParams& params,
                    SamplerRng* rng);
}  // namespace reference

}  // namespace marlaas::model

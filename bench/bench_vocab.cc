// bench_vocab: the per-token work that scales with the vocabulary, at real vocabulary sizes
// (Qwen2.5's 151936; 32000 in --quick), against the plain references on the same inputs in the
// same run:
//   - sampling one token (model/sampler.h): the top-k/top-p cut sorting only the candidates it
//     needs, and per-thread scratch, against reference::SampleToken (the same weights, fresh
//     buffers and a full sort), on peaked logits (a language model's: a few tokens far above a
//     normal tail) and on flat ones (the cut needs most of the vocabulary: the worst case);
//     every pick must be the reference's token;
//   - the fused log-prob forward + backward (kernels/logprob_ops.h, one trainer row per token):
//     the vectorised kernel against the reference (double, libm exp), and the tiny base's 264
//     tokens.
// The best of several runs each; one thread.
//
//   bench_vocab [--json FILE] [--quick]
//
// Exit status: 0, or 1 when a target is missed in a full run (--quick only smoke-tests).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/report.h"
#include "kernels/logprob_ops.h"
#include "model/sampler.h"

namespace marlaas::bench {
namespace {

struct Row {
  std::string name;
  double reference_us, ours_us;  // per token (sampling) or per row (log-prob), best of the runs
  int mismatches;                // sampling: picks that differ from the reference's
  double speed_up() const { return reference_us / ours_us; }
};

// The best of `runs` timings of f, in microseconds per item.
double BestUs(int runs, int items, const std::function<void()>& f) {
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const double t0 = NowSeconds();
    f();
    best = std::min(best, (NowSeconds() - t0) * 1e6 / items);
  }
  return best;
}

std::vector<float> Logits(int32_t vocab, bool peaked, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.f, peaked ? 2.0f : 0.05f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (auto& x : logits) x = normal(*rng);
  if (peaked) {
    for (int i = 0; i < 8; ++i) logits[(*rng)() % uint32_t(vocab)] += 10.0f + float(i);
  }
  return logits;
}

Row Sampling(const char* name, const std::vector<float>& logits, const model::SamplingParams& p,
             int runs, int draws) {
  const int32_t vocab = int32_t(logits.size());
  std::vector<int32_t> ours(static_cast<size_t>(draws)), theirs(ours.size());
  const double ours_us = BestUs(runs, draws, [&] {
    model::SamplerRng rng(7);
    for (int i = 0; i < draws; ++i)
      ours[size_t(i)] = SampleToken(logits.data(), vocab, p, &rng).token;
  });
  const double ref_us = BestUs(runs, draws, [&] {
    model::SamplerRng rng(7);
    for (int i = 0; i < draws; ++i) {
      theirs[size_t(i)] = model::reference::SampleToken(logits.data(), vocab, p, &rng).token;
    }
  });
  int mismatches = 0;
  for (int i = 0; i < draws; ++i) mismatches += ours[size_t(i)] != theirs[size_t(i)];
  return {name, ref_us, ours_us, mismatches};
}

Row Logprob(const char* name, int32_t rows, int32_t vocab, int runs) {
  std::mt19937 rng(3);
  kernels::LogprobProblem p{rows, vocab, vocab, 1.0f / 0.8f};
  std::vector<float> logits;
  for (int32_t i = 0; i < rows; ++i) {
    const std::vector<float> row = Logits(vocab, true, &rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (auto& t : targets) t = int32_t(rng() % uint32_t(vocab));
  std::vector<float> g(static_cast<size_t>(rows), 1.0f), lp(g.size()), lse(g.size());
  std::vector<float> dl(logits.size());
  const double ours_us = BestUs(runs, rows, [&] {
    kernels::TokenLogprobs(p, logits.data(), targets.data(), lp.data(), lse.data());
    kernels::TokenLogprobsBackward(p, logits.data(), targets.data(), lse.data(), g.data(),
                                   dl.data());
  });
  const double ref_us = BestUs(runs, rows, [&] {
    kernels::reference::TokenLogprobs(p, logits.data(), targets.data(), lp.data(), lse.data());
    kernels::reference::TokenLogprobsBackward(p, logits.data(), targets.data(), lse.data(),
                                              g.data(), dl.data());
  });
  return {name, ref_us, ours_us, 0};
}

int Run(int argc, char** argv) {
  BenchArgs args;
  if (!ParseBenchArgs(argc, argv, "bench_vocab [--json FILE] [--quick]", &args)) return 2;
  const bool quick = args.quick;
  const int runs = quick ? 2 : 5;
  const int32_t vocab = quick ? 32000 : 151936;
  const int draws = quick ? 8 : 40;
  std::mt19937 rng(1);
  const std::vector<float> peaked = Logits(vocab, true, &rng);
  const std::vector<float> flat = Logits(vocab, false, &rng);
  model::SamplingParams plain, top_k, top_p;
  top_k.top_k = 50;
  top_p.top_p = 0.9f;
  std::vector<Row> rows = {
      Sampling("sample, no cut", peaked, plain, runs, draws),
      Sampling("sample, top_k 50", peaked, top_k, runs, draws),
      Sampling("sample, top_p 0.9", peaked, top_p, runs, draws),
      Sampling("sample, top_p 0.9 flat", flat, top_p, runs, draws),
      Logprob("logprob fwd+bwd", 8, vocab, runs),
      Logprob("logprob fwd+bwd, 264", 1024, 264, runs),
  };
  std::printf("\nper token (sampling) or per row (log-prob), vocabulary %d, best of %d (us)\n",
              vocab, runs);
  std::printf("%-24s %12s %12s %10s %11s\n", "work", "reference", "ours", "speed-up", "mismatches");
  int mismatches = 0;
  for (const Row& r : rows) {
    std::printf("%-24s %12.1f %12.1f %9.2fx %11d\n", r.name.c_str(), r.reference_us, r.ours_us,
                r.speed_up(), r.mismatches);
    mismatches += r.mismatches;
  }
  const std::vector<Target> targets = {
      // No target without a cut: both draw from the same weights in the same way, and what
      // differs (the reference's fresh vocabulary-sized buffers) is not this code's work.
      {"sample, top_k 50: reference / ours time", rows[1].speed_up(), 5.0, true},
      {"sample, top_p 0.9: reference / ours time", rows[2].speed_up(), 5.0, true},
      // Flat logits: the cut takes most tokens, so ours sorts in rounds what the reference
      // sorts at once; it may not cost much more.
      {"sample, top_p 0.9 flat: reference / ours time", rows[3].speed_up(), 0.7, true},
      {"logprob fwd+bwd: reference / ours time", rows[4].speed_up(), 5.0, true},
      {"picks that differ from the reference's", double(mismatches), 0, false},
  };
  std::vector<std::string> objects;
  for (const Row& r : rows) {
    objects.push_back("{\"work\":\"" + r.name + "\",\"reference_us\":" +
                      JsonNumber(r.reference_us) + ",\"ours_us\":" + JsonNumber(r.ours_us) +
                      ",\"mismatches\":" + std::to_string(r.mismatches) + "}");
  }
  return FinishBench(args, objects, targets);
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Run(argc, argv); }

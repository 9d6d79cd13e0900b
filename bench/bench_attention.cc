// bench_attention: the CPU attention kernels (kernels/attention_ops.h), forward and backward, with
// the long-row path (keys transposed once, scores vectorised across keys, the keys' gradients in
// register blocks) against the per-key path alone (one dot product per key, min_wide_span set past
// kv_len), on the same inputs in the same run. Shapes: the tiny base's pretraining batch (16 rows
// of 128 tokens, causal), trainer batches of 32 and 64 tokens, short rows of 8 (where the
// per-key path is kept), and a 7B-shaped head layout (32 query and 8 key/value heads of 128) on
// 512 tokens (256 in --quick). The best of several runs each; one thread.
//
//   bench_attention [--json FILE] [--quick]
//
// Exit status: 0, or 1 when a target is missed in a full run (--quick only smoke-tests).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/report.h"
#include "kernels/attention_ops.h"

namespace marlaas::bench {
namespace {

struct Shape {
  const char* name;
  int32_t rows, heads, kv_heads, len, head_dim;
};

struct Row {
  std::string shape;
  // Forward + backward, best of the runs: the per-key path alone, and the kernels' own choice
  // (the long-row path for rows with a span of 16 keys or more).
  double per_key_ms, chosen_ms;
  double largest_difference;  // between the two paths' outputs and gradients
};

double Ms(const std::function<void()>& f) {
  const double t0 = NowSeconds();
  f();
  return (NowSeconds() - t0) * 1e3;
}

Row Measure(const Shape& s, int runs) {
  kernels::AttentionProblem p;
  p.rows = s.rows;
  p.heads = s.heads;
  p.kv_heads = s.kv_heads;
  p.q_len = p.kv_len = s.len;
  p.head_dim = s.head_dim;
  p.scale = 1.0f / std::sqrt(float(s.head_dim));
  const size_t plane = size_t(s.len) * size_t(s.len);
  std::unique_ptr<bool[]> causal(new bool[plane]);
  for (int32_t t = 0; t < s.len; ++t)
    for (int32_t j = 0; j < s.len; ++j) causal[size_t(t) * size_t(s.len) + size_t(j)] = j > t;
  p.masked = causal.get();
  const size_t nq = size_t(s.rows) * size_t(s.heads) * size_t(s.len) * size_t(s.head_dim);
  const size_t nkv = size_t(s.rows) * size_t(s.kv_heads) * size_t(s.len) * size_t(s.head_dim);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& e : v) e = normal(rng);
    return v;
  };
  const auto q = random(nq), k = random(nkv), v = random(nkv), d_out = random(nq);
  std::vector<float> out(nq), probs(size_t(s.rows) * size_t(s.heads) * plane), dq(nq), dk(nkv),
      dv(nkv);
  auto step = [&](const kernels::AttentionProblem& problem) {
    kernels::AttentionForward(problem, q.data(), k.data(), v.data(), out.data(), probs.data());
    kernels::AttentionBackward(problem, q.data(), k.data(), v.data(), probs.data(), d_out.data(),
                               dq.data(), dk.data(), dv.data());
  };
  kernels::AttentionProblem per_key = p;
  per_key.min_wide_span = s.len + 1;
  // Alternated, so that a slow spell of the machine falls on both.
  double per_key_ms = 1e30, chosen_ms = 1e30;
  for (int i = 0; i < runs; ++i) {
    per_key_ms = std::min(per_key_ms, Ms([&] { step(per_key); }));
    chosen_ms = std::min(chosen_ms, Ms([&] { step(p); }));
  }
  // The two paths compute the same thing: their results differ by rounding only.
  step(per_key);
  std::vector<float> per_key_results = out;
  for (const auto* x : {&dq, &dk, &dv})
    per_key_results.insert(per_key_results.end(), x->begin(), x->end());
  step(p);
  std::vector<float> chosen_results = out;
  for (const auto* x : {&dq, &dk, &dv})
    chosen_results.insert(chosen_results.end(), x->begin(), x->end());
  double largest = 0;
  for (size_t i = 0; i < chosen_results.size(); ++i) {
    const double d = std::fabs(double(chosen_results[i]) - double(per_key_results[i]));
    largest = std::isnan(d) ? 1e30 : std::max(largest, d / (1.0 + std::fabs(per_key_results[i])));
  }
  return {s.name, per_key_ms, chosen_ms, largest};
}

int Run(int argc, char** argv) {
  BenchArgs args;
  if (!ParseBenchArgs(argc, argv, "bench_attention [--json FILE] [--quick]", &args)) return 2;
  const bool quick = args.quick;
  const int runs = quick ? 2 : 9;
  const std::vector<Shape> shapes = {
      {"pretrain_16x128", 16, 4, 2, 128, 32},
      {"train_64x64", 64, 4, 2, 64, 32},
      {"train_128x32", 128, 4, 2, 32, 32},
      {"short_512x8", 512, 4, 2, 8, 32},
      {quick ? "7b_heads_1x256" : "7b_heads_1x512", 1, 32, 8, quick ? 256 : 512, 128},
  };
  std::vector<Row> rows;
  for (const Shape& s : shapes) rows.push_back(Measure(s, runs));
  std::printf("\ncausal attention, forward + backward, best of %d (ms)\n", runs);
  std::printf("%-18s %12s %12s %10s\n", "shape", "per-key", "chosen", "speed-up");
  for (const Row& r : rows) {
    std::printf("%-18s %12.2f %12.2f %9.2fx\n", r.shape.c_str(), r.per_key_ms, r.chosen_ms,
                r.per_key_ms / r.chosen_ms);
  }
  auto speed_up = [&](size_t i) { return rows[i].per_key_ms / rows[i].chosen_ms; };
  double largest_difference = 0;
  for (const Row& r : rows) largest_difference = std::max(largest_difference, r.largest_difference);
  const std::vector<Target> targets = {
      {"pretrain_16x128: per-key / chosen time", speed_up(0), 2.0, true},
      {"train_64x64: per-key / chosen time", speed_up(1), 1.5, true},
      {rows[4].shape + ": per-key / chosen time", speed_up(4), 1.5, true},
      // Rows of 8 keep the per-key path: the same code, within noise.
      {"short_512x8: per-key / chosen time", speed_up(3), 0.85, true},
      // Relative to 1 + |value|, over out, dq, dk and dv of every shape.
      {"largest difference between the paths' results", largest_difference, 1e-4, false},
  };
  std::vector<std::string> objects;
  for (const Row& r : rows) {
    objects.push_back("{\"shape\":\"" + r.shape + "\",\"per_key_ms\":" + JsonNumber(r.per_key_ms) +
                      ",\"chosen_ms\":" + JsonNumber(r.chosen_ms) +
                      ",\"largest_difference\":" + JsonNumber(r.largest_difference) + "}");
  }
  return FinishBench(args, objects, targets);
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Run(argc, argv); }

// Shared by the benchmarks: percentiles, CPU pinning, target checks and JSON output. A target is
// a ratio or rate measured within one run; a benchmark exits non-zero when one is missed, so it
// can fail. Single-threaded helpers.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace marlaas::bench {

// p in [0, 100]; sorts a copy. Empty input gives 0.
double Percentile(std::vector<double> values, double p);

// Pins the calling process to `cpu` when the machine has more than one; ignores failure.
void PinToCpu(int cpu);

double NowSeconds();

struct Target {
  std::string name;  // what is compared, e.g. "ring 1MiB GB/s / memcpy 1MiB GB/s"
  double value;      // measured
  double threshold;  // required
  bool higher_is_better;
  bool met() const { return higher_is_better ? value >= threshold : value <= threshold; }
};

// Prints the targets as a table; returns how many were missed.
int PrintTargets(const std::vector<Target>& targets, FILE* out);
// `"targets":[...]` for the JSON file.
std::string TargetsJson(const std::vector<Target>& targets);
// A JSON number, or null for a negative value (our "not measured").
std::string JsonNumber(double v);

}  // namespace marlaas::bench

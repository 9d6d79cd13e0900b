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

// The flags every benchmark takes: --json FILE and --quick. Returns false (the caller exits 2)
// after naming what is wrong: an unknown argument, --json without a file name, or a --json file
// that cannot be written (CheckOutputFile), before the run.
struct BenchArgs {
  std::string json_path;
  bool quick = false;
};
bool ParseBenchArgs(int argc, char** argv, const char* usage, BenchArgs* out);

// Writes {"results":[<rows>], "targets":[...], "quick":...} to args.json_path (if set), prints
// the targets, and returns the benchmark's exit status: 0, or 1 when a full run missed a target
// (a quick run only smoke-tests) or the file could not be written (said on stderr).
int FinishBench(const BenchArgs& args, const std::vector<std::string>& result_objects,
                const std::vector<Target>& targets);

}  // namespace marlaas::bench

#include "bench/report.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "base/file_util.h"

namespace marlaas::bench {

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * double(values.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return values[lo] + (values[hi] - values[lo]) * (rank - double(lo));
}

void PinToCpu(int cpu) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int PrintTargets(const std::vector<Target>& targets, FILE* out) {
  int missed = 0;
  std::fprintf(out, "\n%-58s %12s %12s  %s\n", "target", "measured", "required", "");
  for (const Target& t : targets) {
    std::fprintf(out, "%-58s %12.3f %s%11.3f  %s\n", t.name.c_str(), t.value,
                 t.higher_is_better ? ">=" : "<=", t.threshold, t.met() ? "met" : "MISSED");
    missed += !t.met();
  }
  return missed;
}

std::string JsonNumber(double v) {
  if (v < 0 || !std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string TargetsJson(const std::vector<Target>& targets) {
  std::string s = "\"targets\":[";
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    s += (i ? "," : "");
    s += "{\"name\":\"" + t.name + "\",\"value\":" + JsonNumber(t.value) +
         ",\"threshold\":" + JsonNumber(t.threshold) +
         ",\"higher_is_better\":" + (t.higher_is_better ? "true" : "false") +
         ",\"met\":" + (t.met() ? "true" : "false") + "}";
  }
  return s + "]";
}

bool ParseBenchArgs(int argc, char** argv, const char* usage, BenchArgs* out) {
  const char* name = argc > 0 ? argv[0] : "bench";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc && argv[i + 1][0] != '\0' &&
        std::string(argv[i + 1]).rfind("--", 0) != 0) {
      out->json_path = argv[++i];
      // Checked now: a full run takes minutes, and its results were lost to a typo at the end.
      if (Status st = CheckOutputFile("--json", out->json_path); !st.ok()) {
        std::fprintf(stderr, "%s: %s\n", name, st.message().c_str());
        return false;
      }
    } else if (a == "--quick") {
      out->quick = true;
    } else {
      std::fprintf(
          stderr, "%s: %s\nusage: %s\n", name,
          a == "--json" ? "--json needs a file name" : ("unknown argument '" + a + "'").c_str(),
          usage);
      return false;
    }
  }
  return true;
}

int FinishBench(const BenchArgs& args, const std::vector<std::string>& result_objects,
                const std::vector<Target>& targets) {
  const int missed = PrintTargets(targets, stdout);
  if (!args.json_path.empty()) {
    std::string json = "{\"results\":[";
    for (size_t i = 0; i < result_objects.size(); ++i) {
      json += (i ? ",\n" : "\n") + result_objects[i];
    }
    json += "],\n" + TargetsJson(targets) + ",\"quick\":" + (args.quick ? "true" : "false") + "}\n";
    // Written whole or not at all, and a failure (a full disk) is told, never lost in silence.
    if (Status st = WriteFileAtomically(args.json_path, json); !st.ok()) {
      std::fprintf(stderr, "--json %s: the results were not written: %s\n", args.json_path.c_str(),
                   st.message().c_str());
      return 1;
    }
  }
  if (args.quick) return 0;
  return missed == 0 ? 0 : 1;
}

}  // namespace marlaas::bench

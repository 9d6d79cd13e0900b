// bench_sandbox: runs/s and p50/p99 latency of (a) a trivial program (/bin/true), (b) a python3
// one-liner and (c) the Python-tests verifier, under our full isolation, plain fork/exec with no
// isolation, and bubblewrap when installed. Latency: one worker, runs one after another. Runs/s:
// two worker processes (the machine's two cores), wall time for all runs.
//
// full_prepared is full isolation with sandboxes prepared ahead (sandbox_pool.h, one ready per
// worker). Then the pool question: how much of a run is sandbox set-up (fork, namespaces, cgroup
// join, mounts, pivot_root — everything before execve), with and without the per-run cgroup, and
// what preparing ahead changes in latency and throughput, measured side by side; and what the
// run's init costs (the program as PID 2, against as_pid1).
//
// Last, candidates verified together (sandbox/python_tests_verifier.h: one sandbox and one
// interpreter start per call, one forked process per candidate): CPU time per candidate (the
// calling thread's and the sandbox runs' process trees) and wall time per candidate, for groups
// of 1, 4, 8 and 16 candidates, half of them right and half wrong.
//
//   bench_sandbox [--json FILE] [--quick]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/cpu_time.h"
#include "bench/report.h"
#include "sandbox/python_tests_verifier.h"
#include "sandbox/sandbox.h"
#include "sandbox/sandbox_pool.h"

extern char** environ;

namespace marlaas::bench {
namespace {

using sandbox::PythonTestsSpec;
using sandbox::SandboxRequest;

struct Row {
  std::string isolation, workload;
  double runs_per_s, p50_ms, p99_ms;
  double setup_p50_ms = -1;  // full isolation: the part before execve
};

const char kCandidate[] = "def f(x):\n    return x * x\n";

PythonTestsSpec Spec() {
  PythonTestsSpec s;
  s.function_name = "f";
  s.tests = {{"[3]", "9"}, {"[-2]", "4"}, {"[0]", "0"}, {"[12]", "144"}};
  return s;
}

std::vector<std::string> Argv(const std::string& workload) {
  if (workload == "trivial") return {"/bin/true"};
  return {"/usr/bin/python3", "-I", "-S", "-c", "pass"};
}

// Plain posix_spawn + wait: no isolation at all.
bool SpawnPlain(const std::vector<std::string>& argv) {
  std::vector<char*> a;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, a[0], nullptr, nullptr, a.data(), environ) != 0) return false;
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

std::vector<std::string> Bwrap(const std::vector<std::string>& argv) {
  std::vector<std::string> a = {"/usr/bin/bwrap", "--unshare-all", "--die-with-parent",
                                "--ro-bind",      "/usr",          "/usr",
                                "--symlink",      "usr/bin",       "/bin",
                                "--symlink",      "usr/lib",       "/lib",
                                "--symlink",      "usr/lib64",     "/lib64",
                                "--proc",         "/proc",         "--dev",
                                "/dev",           "--tmpfs",       "/work",
                                "--chdir",        "/work"};
  a.insert(a.end(), argv.begin(), argv.end());
  return a;
}

// One run of `workload` under `isolation`; false on failure. `setup_ms` gets the sandbox's
// set-up time where it is known (full isolation, not python_tests), else stays unchanged.
bool RunOnce(const std::string& iso, const std::string& workload, double* setup_ms = nullptr,
             bool cgroup = true, bool as_pid1 = false, double* wall_ms = nullptr) {
  // full_prepared is full isolation with sandboxes prepared ahead (the pool is set in Measure).
  const std::string isolation = iso == "full_prepared" ? "full" : iso;
  if (workload == "python_tests") {
    if (isolation == "full") {
      return sandbox::VerifyPythonFunction(kCandidate, Spec()).outcome == pb::OUTCOME_OK;
    }
    // The same harness work without our sandbox: the candidate and 4 calls in one python3.
    const std::string code = std::string(kCandidate) + "for a in (3, -2, 0, 12): f(a)\n";
    std::vector<std::string> argv = {"/usr/bin/python3", "-I", "-S", "-c", code};
    return SpawnPlain(isolation == "bwrap" ? Bwrap(argv) : argv);
  }
  if (isolation == "full") {
    SandboxRequest r;
    r.argv = Argv(workload);
    r.limits.cgroup_limits = cgroup;
    r.as_pid1 = as_pid1;
    auto res = sandbox::RunSandboxed(r);
    if (res.ok() && setup_ms != nullptr) *setup_ms = res->setup_ms;
    if (res.ok() && wall_ms != nullptr) *wall_ms = res->wall_ms;
    return res.ok() && res->outcome == sandbox::SandboxOutcome::kExited && res->exit_code == 0;
  }
  return SpawnPlain(isolation == "bwrap" ? Bwrap(Argv(workload)) : Argv(workload));
}

bool Measure(const std::string& isolation, const std::string& workload, int runs, Row* row) {
  const int pool = isolation == "full_prepared" ? 1 : 0;
  sandbox::SetPreparedSandboxPool(pool);
  std::vector<double> ms, setup;
  for (int i = 0; i < runs + 3; ++i) {  // 3 warm-up runs
    const double t0 = NowSeconds();
    double s = -1;
    if (!RunOnce(isolation, workload, &s)) return false;
    if (i >= 3) ms.push_back((NowSeconds() - t0) * 1e3);
    if (i >= 3 && s >= 0) setup.push_back(s);
  }
  if (!setup.empty()) row->setup_p50_ms = Percentile(setup, 50);
  row->p50_ms = Percentile(ms, 50);
  row->p99_ms = Percentile(ms, 99);
  // Throughput: two worker processes sharing the runs.
  const double t0 = NowSeconds();
  pid_t workers[2];
  for (int w = 0; w < 2; ++w) {
    workers[w] = fork();
    if (workers[w] == 0) {
      sandbox::SetPreparedSandboxPool(pool);  // a forked child starts with an empty pool
      for (int i = 0; i < runs / 2; ++i)
        if (!RunOnce(isolation, workload)) _exit(1);
      sandbox::SetPreparedSandboxPool(0);  // _exit runs no exit handlers: drop the ready one
      _exit(0);
    }
  }
  bool ok = true;
  for (pid_t p : workers) {
    int st = 0;
    waitpid(p, &st, 0);
    ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  }
  row->runs_per_s = double(runs / 2 * 2) / (NowSeconds() - t0);
  sandbox::SetPreparedSandboxPool(0);
  return ok;
}

struct GroupRow {
  int group;
  double cpu_ms, wall_ms;  // per candidate
};

// `calls` calls of VerifyPythonFunctions with `group` candidates each (after one warm-up call);
// false when a verdict is not the expected one.
bool MeasureGroup(int group, int calls, GroupRow* row) {
  const PythonTestsSpec spec = Spec();
  std::vector<sandbox::PythonCandidate> candidates;
  for (int i = 0; i < group; ++i) {
    candidates.push_back(
        {i % 2 ? "def f(x):\n    return x + x\n" : kCandidate, spec.function_name, spec.tests});
  }
  double cpu_ms = 0, wall_s = 0;
  for (int call = 0; call <= calls; ++call) {
    const double t0 = NowSeconds();
    const int64_t thread0 = ThreadCpuNanos();
    const std::vector<sandbox::Verdict> v = sandbox::VerifyPythonFunctions(candidates, spec.limits);
    double cpu = double(ThreadCpuNanos() - thread0) * 1e-6;
    for (int i = 0; i < group; ++i) {
      if (v[size_t(i)].outcome != (i % 2 ? pb::OUTCOME_WRONG_ANSWER : pb::OUTCOME_OK)) {
        std::fprintf(stderr, "bench_sandbox: group of %d, candidate %d: %s\n", group, i,
                     v[size_t(i)].detail.c_str());
        return false;
      }
      cpu += v[size_t(i)].cpu_ms;
    }
    if (call == 0) continue;  // warm-up
    cpu_ms += cpu;
    wall_s += NowSeconds() - t0;
  }
  row->group = group;
  row->cpu_ms = cpu_ms / double(calls * group);
  row->wall_ms = wall_s * 1e3 / double(calls * group);
  return true;
}

int Run(int argc, char** argv) {
  BenchArgs args;
  if (!ParseBenchArgs(argc, argv, "bench_sandbox [--json FILE] [--quick]", &args)) return 2;
  const int runs = args.quick ? 20 : 200;
  std::vector<std::string> isolations = {"full", "full_prepared", "none"};
  if (access("/usr/bin/bwrap", X_OK) == 0) isolations.push_back("bwrap");
  std::vector<Row> rows;
  for (const char* workload : {"trivial", "python", "python_tests"}) {
    for (const std::string& iso : isolations) {
      Row r{iso, workload, 0, 0, 0};
      if (!Measure(iso, workload, runs, &r)) {
        std::fprintf(stderr, "bench_sandbox: %s / %s failed\n", iso.c_str(), workload);
        return 1;
      }
      rows.push_back(r);
    }
  }
  auto find = [&](const std::string& iso, const std::string& w) -> const Row& {
    for (const Row& r : rows)
      if (r.isolation == iso && r.workload == w) return r;
    return rows[0];
  };
  std::printf("\n%-14s %-13s %10s %9s %9s\n", "isolation", "workload", "runs/s", "p50 ms",
              "p99 ms");
  for (const Row& r : rows) {
    std::printf("%-14s %-13s %10.1f %9.2f %9.2f\n", r.isolation.c_str(), r.workload.c_str(),
                r.runs_per_s, r.p50_ms, r.p99_ms);
  }
  // The pool question: set-up p50 with and without the per-run cgroup, on /bin/true.
  std::vector<double> with_cg, without_cg;
  for (int i = 0; i < runs; ++i) {
    double a = 0, b = 0;
    if (!RunOnce("full", "trivial", &a, true) || !RunOnce("full", "trivial", &b, false)) {
      std::fprintf(stderr, "bench_sandbox: set-up runs failed\n");
      return 1;
    }
    with_cg.push_back(a);
    without_cg.push_back(b);
  }
  // What the run's init costs (the program as PID 2 below it, against the program as PID 1):
  // a run's wall time, call to exit status, on /bin/true, interleaved.
  std::vector<double> with_init, as_pid1;
  for (int i = 0; i < runs; ++i) {
    double a = 0, b = 0;
    if (!RunOnce("full", "trivial", nullptr, true, false, &a) ||
        !RunOnce("full", "trivial", nullptr, true, true, &b)) {
      std::fprintf(stderr, "bench_sandbox: init runs failed\n");
      return 1;
    }
    with_init.push_back(a);
    as_pid1.push_back(b);
  }
  const Row& py = find("full", "python");
  std::printf(
      "\nsandbox set-up (before execve), p50 ms: %.2f with the per-run cgroup, %.2f "
      "without\n",
      Percentile(with_cg, 50), Percentile(without_cg, 50));
  std::printf(
      "a /bin/true run's wall time, p50 ms: %.2f with the init (program as PID 2), %.2f with the "
      "program as PID 1 (p99 %.2f, %.2f)\n",
      Percentile(with_init, 50), Percentile(as_pid1, 50), Percentile(with_init, 99),
      Percentile(as_pid1, 99));
  const Row& pre = find("full_prepared", "python");
  const Row& pt = find("full", "python_tests");
  const Row& ptp = find("full_prepared", "python_tests");
  std::printf(
      "python under full isolation: p50 %.2f ms, of which set-up %.2f ms; prepared "
      "ahead (a pool of 1 per worker): p50 %.2f ms, p99 %.2f ms (fresh: %.2f)\n",
      py.p50_ms, py.setup_p50_ms, pre.p50_ms, pre.p99_ms, py.p99_ms);
  std::printf(
      "python-tests, prepared / fresh: p50 %.2fx, p99 %.2fx, runs/s with 2 busy workers "
      "%.2fx\n",
      ptp.p50_ms / pt.p50_ms, ptp.p99_ms / pt.p99_ms, ptp.runs_per_s / pt.runs_per_s);
  std::vector<GroupRow> groups;
  for (int g : {1, 4, 8, 16}) {
    GroupRow row{};
    if (!MeasureGroup(g, std::max(2, (args.quick ? 40 : 400) / g), &row)) return 1;
    groups.push_back(row);
  }
  std::printf("\npython-tests candidates verified together (full isolation, one worker)\n");
  std::printf("%6s %16s %17s %14s\n", "group", "CPU ms/candidate", "wall ms/candidate",
              "CPU vs alone");
  for (const GroupRow& g : groups) {
    std::printf("%6d %16.2f %17.2f %13.2fx\n", g.group, g.cpu_ms, g.wall_ms,
                g.cpu_ms / groups[0].cpu_ms);
  }
  std::vector<Target> targets = {
      {"python p50: full isolation minus plain fork/exec (ms)",
       find("full", "python").p50_ms - find("none", "python").p50_ms, 5.0, false},
      {"python-tests verifications/s, full isolation, 2 workers",
       find("full", "python_tests").runs_per_s, 60.0, true},
      {"python-tests p99 latency, full isolation (ms)", find("full", "python_tests").p99_ms, 50.0,
       false},
      {"python-tests CPU per candidate, a group of 4 / alone", groups[1].cpu_ms / groups[0].cpu_ms,
       0.5, false},
  };
  std::vector<std::string> objects;
  for (const Row& r : rows) {
    // The shape keeps isolation to full|none|bwrap: a prepared-ahead row is "full" with
    // "prepared": true (extra fields: prepared, setup_p50_ms).
    const bool prepared = r.isolation == "full_prepared";
    objects.push_back(
        "{\"isolation\":\"" + std::string(prepared ? "full" : r.isolation) + "\",\"workload\":\"" +
        r.workload + "\",\"runs_per_s\":" + JsonNumber(r.runs_per_s) +
        ",\"p50_ms\":" + JsonNumber(r.p50_ms) + ",\"p99_ms\":" + JsonNumber(r.p99_ms) +
        ",\"prepared\":" + (prepared ? "true" : "false") +
        ",\"setup_p50_ms\":" + JsonNumber(r.setup_p50_ms) + "}");
  }
  objects.push_back(
      "{\"isolation\":\"full\",\"workload\":\"trivial_init_cost\",\"p50_ms_with_init\":" +
      JsonNumber(Percentile(with_init, 50)) +
      ",\"p50_ms_as_pid1\":" + JsonNumber(Percentile(as_pid1, 50)) + "}");
  for (const GroupRow& g : groups) {
    objects.push_back("{\"isolation\":\"full\",\"workload\":\"python_tests_group\",\"group\":" +
                      std::to_string(g.group) +
                      ",\"cpu_ms_per_candidate\":" + JsonNumber(g.cpu_ms) +
                      ",\"wall_ms_per_candidate\":" + JsonNumber(g.wall_ms) + "}");
  }
  return FinishBench(args, objects, targets);
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Run(argc, argv); }

// Checks candidate Python functions against hidden test cases, in the sandbox. The harness
// inside receives only the inputs; each call's result comes back as JSON and the comparison with
// the expected outputs happens out here, so the expected values never enter the sandbox. A
// candidate that raises — on import or in any call — never passes, also when the expected output
// is None. Reward 1 when every case passes, else 0.
//
// Many candidates share one sandbox run (VerifyPythonFunctions): the harness starts the
// interpreter once, then forks one process per candidate, one at a time, so a GRPO group pays for
// Python's start-up once instead of once per sample. Each candidate is still judged alone, as if it
// had the sandbox to itself:
//  - its process gets the run's rlimits afresh (CPU time, address space, files, processes) and its
//    own wall-clock limit, which does not count the time it waited for a CPU (its schedstat
//    run delay; at most 4x the limit in all), so a busy machine does not score it 0; its stdout
//    and stderr go nowhere, its results to a pipe of its own, capped at the run's output limit;
//  - before the next candidate starts, every process it left is killed and reaped (the harness is
//    PID 1 and signals -1) and /work is emptied;
//  - the harness cannot be reached from a candidate: it is not dumpable, no process in the
//    sandbox holds a capability, signals to PID 1 are dropped, and seccomp refuses setting another
//    process's priority, affinity or rlimits and kernel-persistent IPC objects
//    (sandbox/seccomp_filter.h);
//  - a candidate killed by SIGKILL (the hard CPU limit, or the run's cgroup at its memory limit)
//    ends the run, so that the run's cgroup tells which; so does a harness that breaks. The
//    candidates not yet run then continue in a fresh sandbox.
// Sandbox set-up failures are retried (infra_attempts runs in all that judge nothing); what is
// left after them is OUTCOME_INFRA_ERROR.
#pragma once

#include <string>
#include <vector>

#include "sandbox/sandbox.h"
#include "sandbox/verdict.h"

namespace marlaas::sandbox {

struct PythonTestCase {
  std::string args_json;      // a JSON array of positional arguments
  std::string expected_json;  // the expected return value as JSON
};

struct PythonTestsSpec {
  std::string function_name;
  std::vector<PythonTestCase> tests;
  SandboxLimits limits;    // per candidate
  int infra_attempts = 3;  // sandbox set-up failures are retried this many times in all
};

// One candidate and what it is checked against.
struct PythonCandidate {
  std::string source;
  std::string function_name;
  std::vector<PythonTestCase> tests;
};

// One verdict per candidate, in order. `limits` hold for each candidate alone (the run's own
// wall-clock and output limits are sized for all of them). A verdict's cpu_ms is its share of
// the runs' CPU time (the runs' total split evenly over the candidates each judged).
std::vector<Verdict> VerifyPythonFunctions(const std::vector<PythonCandidate>& candidates,
                                           const SandboxLimits& limits, int infra_attempts = 3);

// One candidate: VerifyPythonFunctions with one.
Verdict VerifyPythonFunction(const std::string& candidate_source, const PythonTestsSpec& spec);

}  // namespace marlaas::sandbox

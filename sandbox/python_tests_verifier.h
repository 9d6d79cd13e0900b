// Checks candidate Python functions against hidden test cases, in the sandbox. The harness
// inside receives only the inputs; each call's result comes back as JSON and the comparison with
// the expected outputs happens out here, so the expected values never enter the sandbox. A
// candidate that raises — on import or in any call — never passes, also when the expected output
// is None. Reward 1 when every case passes, else 0.
//
// Many candidates share one sandbox run (VerifyPythonFunctions): the harness starts the
// interpreter once, then forks one process per candidate, one at a time, so a GRPO group pays for
// Python's start-up once instead of once per sample. Each candidate is still judged as if it had
// the sandbox to itself (in GRPO, a candidate that made a sibling fail would raise its own
// advantage):
//  - its process has a session of its own, the run's rlimits afresh and its own wall-clock limit,
//    which does not count the time it waited for a CPU (its schedstat run delay, at most 4x the
//    limit in all) if it ran as one thread of one process (the pid namespace's last pid is still
//    its own: it started no thread or process); it is dumpable, so that the harness sees it in
//    /proc under hidepid; it writes its results to the run's stdout, between the harness's start
//    and end frames, which carry a per-run key that its copy of the harness's memory no longer
//    holds (it cannot forge a frame); what it writes there counts against its own output limit;
//  - before its end is framed, every process in the sandbox but the harness is killed and reaped
//    (the harness is PID 1, as_pid1 in sandbox.h, and signals -1); then /work is emptied;
//  - it cannot reach the harness or what the harness passes on: the harness is not dumpable (so
//    not even listed in /proc: hidepid), no process in the sandbox holds a capability, signals to
//    PID 1 are dropped, seccomp refuses setting another process's priority, affinity or rlimits and
//    kernel-persistent IPC objects (sandbox/seccomp_filter.h), and a harness whose OOM score,
//    autogroup, priority, affinity or rlimits changed anyway hands the rest to a fresh sandbox;
//  - nothing of an earlier candidate's code or results is in the memory it starts with: sources
//    arrive on stdin one at a time (the rest wait in the kernel's socket buffer) and pass only
//    through a buffer the harness zeroes, and the harness never reads a result (what it keeps of
//    an earlier candidate is how its process ended and the sizes of its stdin frame);
//  - a candidate killed by SIGKILL (the hard CPU limit, or the run's cgroup at its memory limit)
//    ends the run, so that the run's cgroup tells which; a run that ends while a candidate other
//    than its first runs does not judge it, and one whose cgroup killed anything at its memory
//    limit runs again, alone, every candidate that ran in it.
// A harness that breaks while a candidate runs has that candidate retried alone. Sandbox set-up
// failures are retried (infra_attempts runs in a row that judge nothing); what is left after them
// is OUTCOME_INFRA_ERROR. Result lines nested deeper than 2000 levels are ignored.
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

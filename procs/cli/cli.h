// The `marlaas` command line: a table of subcommands, each a function from its arguments to an
// exit code. Exit codes: 0 success, 1 the operation failed, 2 bad usage.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace marlaas::cli {

struct Command {
  const char* name;
  const char* args;     // usage synopsis after the name
  const char* summary;  // one line for `marlaas --help`
  int (*run)(const std::vector<std::string>& args);
};

// The commands, in the order `--help` lists them.
const std::vector<Command>& Commands();
int Main(int argc, char** argv);

// Subcommands (one file each).
int RunSegments(const std::vector<std::string>& args);
int RunClean(const std::vector<std::string>& args);
int RunValidate(const std::vector<std::string>& args);
int RunGpus(const std::vector<std::string>& args);
int RunPretrain(const std::vector<std::string>& args);
int RunSandboxCheck(const std::vector<std::string>& args);
int RunSandboxRun(const std::vector<std::string>& args);
int RunServe(const std::vector<std::string>& args);
int RunDemo(const std::vector<std::string>& args);
int RunSample(const std::vector<std::string>& args);
int RunSubmit(const std::vector<std::string>& args);
int RunStatus(const std::vector<std::string>& args);
int RunStop(const std::vector<std::string>& args);
int RunExport(const std::vector<std::string>& args);
int RunLogs(const std::vector<std::string>& args);
int RunReport(const std::vector<std::string>& args);
int RunBench(const std::vector<std::string>& args);
int RunBenchSim(std::vector<std::string> args);  // `bench sim`
int RunTasks(const std::vector<std::string>& args);

// Small argument helper: removes "--name VALUE" (or "--name=VALUE") from args; returns false if
// absent. A VALUE starting with "--", or an empty one, is not taken: the flag, lacking its value,
// stays in args for RejectRest or RejectOptions to name ("--json is empty").
bool TakeFlag(std::vector<std::string>* args, const std::string& name, std::string* value);
// Splits a comma-separated list ("1,8,32") into *out; false when it is empty or has an empty item
// ("", "8,", ",8", "1,,8").
bool SplitList(const std::string& text, std::vector<std::string>* out);
// Removes "--name N" and parses N into *value when present. A malformed N, or one outside
// [lo, hi], prints "marlaas COMMAND: --name: 'N' is not a number in [lo, hi]" and returns false
// (the caller exits with 2); an absent flag leaves *value as it was and returns true.
bool TakeNumber(std::vector<std::string>* args, const char* command, const std::string& name,
                double lo, double hi, double* value);
// The same for a whole number ("... is not a whole number in [lo, hi]").
bool TakeInteger(std::vector<std::string>* args, const char* command, const std::string& name,
                 long long lo, long long hi, long long* value);
// `marlaas sandbox-run`: its arguments and what its exit status says.
inline constexpr const char kSandboxRunArgs[] =
    "[--lang python|sh] [--timeout-ms N] [--memory-mb N] FILE";
inline constexpr const char kSandboxRunStatuses[] =
    "exit status: 0 ok, 1 the program exited non-zero (a Python MemoryError at the per-process "
    "limit included), 3 timeout (wall clock or CPU), 4 killed by a signal (a crash), 5 output "
    "limit, 6 sandbox failure, 7 memory limit (the run's cgroup)";
// Removes "--instance NAME" when present and checks NAME as shm/segment.h does (1-32 characters
// of [A-Za-z0-9_-]); a bad one prints "marlaas COMMAND: --instance: ..." and returns false (the
// caller exits with 2). Absent, *instance stays as it was.
bool TakeInstance(std::vector<std::string>* args, const char* command, std::string* instance);
// Removes a bare "--name" switch; returns whether it was present.
bool TakeSwitch(std::vector<std::string>* args, const std::string& name);
// Prints "marlaas NAME: unexpected argument ..." and returns 2 if args is non-empty, else 0
// (for one that starts with '-': an unknown option, one given twice, or one without its value).
int RejectRest(const char* command, const std::vector<std::string>& args);
// After the options are taken, what is left are the positional arguments: 2, naming the first
// that starts with '-' (an unknown option, or an option given last without its value, which
// would otherwise be taken for a tenant or a file; "--name is empty" for one given an empty
// value), else 0.
int RejectOptions(const char* command, const std::vector<std::string>& args);

}  // namespace marlaas::cli

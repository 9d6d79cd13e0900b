#include "procs/cli/cli.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "shm/segment.h"

namespace marlaas::cli {

const std::vector<Command>& Commands() {
  static const std::vector<Command> kCommands = {
      {"demo", "[--state-dir DIR] [--summary FILE] [--tenants N] [--steps N] [--threads N]",
       "pretrain the tiny base if needed, train 8 tenants on the 4 built-in tasks, and report",
       RunDemo},
      {"serve",
       "[--job FILE ...] [--state-dir DIR] [--model-dir DIR] [--device cpu|cuda[:N]] "
       "[--rollout-replicas N] [--timeout-s S] [--stall-timeout-s S] [--max-tenants N] "
       "[--memory-budget-mb M (0: none)] [--metrics-port P] [--threads N] [--verifier-workers N] "
       "[--instance NAME] [--allow-weak-sandbox] [--quiet]",
       "run the service with its control socket; with jobs, until every tenant is done", RunServe},
      {"submit", "JOB.json [--state-dir DIR]",
       "admit a tenant into the running service; prints its id and token", RunSubmit},
      {"status", "[TENANT] [--json] [--state-dir DIR] [--token T]",
       "the tenants this token may see: state, step, reward, staleness", RunStatus},
      {"stop", "TENANT [--state-dir DIR] [--token T]", "stop a tenant; its checkpoints stay",
       RunStop},
      {"export", "TENANT --out DIR [--state-dir DIR] [--token T]",
       "write a tenant's latest adapter in PEFT layout", RunExport},
      {"logs", "TENANT [--lines N] [--state-dir DIR] [--token T]", "a tenant's trainer log",
       RunLogs},
      {"report", "[--state-dir DIR] [--out DIR]",
       "reward curves, utilisation timeline and a table from a service's state dir", RunReport},
      {"bench",
       "pipeline [--tenants 1,8,32] [--steps K] [--seeds N] [--repeats R] [--modes M,M] "
       "[--env-latency-ms MS] [--threads N] [--timeout-s S] [--state-dir DIR] [--model-dir DIR] "
       "[--keep-state] [--json FILE] | sim --calibrate FILE[,FILE] [--validate FILE[,FILE]] "
       "[--profile FILE] [--tenants N,N] [--gpus N,N] [--modes M,M] [--max-error E] "
       "[--json FILE]",
       "sequential_sync vs multi_tenant_sync vs async on the same tenants, in one run; the "
       "scheduler's simulator calibrated from such a run",
       RunBench},
      {"validate", "JOB.json", "check a job spec and print it with every default filled in",
       RunValidate},
      {"segments", "[--instance NAME]", "list MARLaaS shared-memory segments and their owners",
       RunSegments},
      {"clean", "[--instance NAME] [--dry-run]",
       "remove shared-memory segments whose creating process has exited (--instance: only "
       "its own), and what killed sandbox runs of any instance left (run cgroups of dead "
       "processes, old empty mount points; not with --dry-run)",
       RunClean},
      {"gpus", "", "list the CUDA devices this build can use, or say why there are none", RunGpus},
      {"sandbox-check", "", "show the isolation this host provides and run the escape suite",
       RunSandboxCheck},
      {"sandbox-run", kSandboxRunArgs,
       "run one file under the verifiers' sandbox; the exit status names the outcome",
       RunSandboxRun},
      {"sample",
       "--task T [--adapter DIR] [--n N] [--temperature X] [--difficulty D] [--seed S] "
       "[--model-dir DIR] [--quiet (the mean only)]",
       "show a model's (and adapter's) answers and rewards on held-out examples", RunSample},
      {"tasks", "--task T [--n N] [--seed S] [--difficulty D] [--held-out] | --check FILE",
       "a built-in task's examples as JSONL (a custom job's dataset), or check a JSONL file",
       RunTasks},
      {"pretrain", "--out DIR [--seed N] [--steps N]",
       "train the built-in tiny base model (cached) and report its exact-match rate", RunPretrain},
  };
  return kCommands;
}

static void PrintHelp(FILE* out) {
  std::fprintf(out,
               "usage: marlaas COMMAND [ARGS]\n\n"
               "Multi-tenant asynchronous RL fine-tuning as a service.\n\ncommands:\n");
  for (const Command& c : Commands()) {
    std::fprintf(out, "  %-13s %-41s %s\n", c.name, c.args, c.summary);
  }
  std::fprintf(out, "\n`marlaas COMMAND --help` shows one command's usage.\n");
}

bool TakeFlag(std::vector<std::string>* args, const std::string& name, std::string* value) {
  for (size_t i = 0; i < args->size(); ++i) {
    // A value never starts with "--": `--job --state-dir X` lacks the job's file, and it stays
    // behind for RejectRest or RejectOptions to name, rather than "--state-dir" taken for one.
    // Nor is an empty one (`--json ''`, `--json=`): it would read as the option's default.
    if ((*args)[i] == name && i + 1 < args->size() && !(*args)[i + 1].empty() &&
        (*args)[i + 1].rfind("--", 0) != 0) {
      *value = (*args)[i + 1];
      args->erase(args->begin() + long(i), args->begin() + long(i) + 2);
      return true;
    }
    if ((*args)[i].rfind(name + "=", 0) == 0 && (*args)[i].size() > name.size() + 1) {
      *value = (*args)[i].substr(name.size() + 1);
      args->erase(args->begin() + long(i));
      return true;
    }
  }
  return false;
}

bool SplitList(const std::string& text, std::vector<std::string>* out) {
  out->clear();
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    if (item.empty()) return false;
    out->push_back(item);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

bool TakeNumber(std::vector<std::string>* args, const char* command, const std::string& name,
                double lo, double hi, double* value) {
  std::string text;
  if (!TakeFlag(args, name, &text)) return true;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  // Plain decimal only: strtod also takes " 5", "+5", hex ("0x10") and "inf".
  const bool plain =
      text.find_first_not_of("-.0123456789eE") == std::string::npos &&
      (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-' || text[0] == '.');
  if (text.empty() || !plain || errno != 0 || *end != '\0' || !(v >= lo && v <= hi)) {
    std::fprintf(stderr, "marlaas %s: %s: '%s' is not a number in [%g, %g]\n", command,
                 name.c_str(), text.c_str(), lo, hi);
    return false;
  }
  *value = v;
  return true;
}

bool TakeInteger(std::vector<std::string>* args, const char* command, const std::string& name,
                 long long lo, long long hi, long long* value) {
  std::string text;
  if (!TakeFlag(args, name, &text)) return true;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  // Digits with an optional '-': strtoll also takes " 5" and "+5".
  const bool plain = text.find_first_not_of("-0123456789") == std::string::npos &&
                     text.find('-', 1) == std::string::npos;
  if (text.empty() || !plain || errno != 0 || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "marlaas %s: %s: '%s' is not a whole number in [%lld, %lld]\n", command,
                 name.c_str(), text.c_str(), lo, hi);
    return false;
  }
  *value = v;
  return true;
}

bool TakeInstance(std::vector<std::string>* args, const char* command, std::string* instance) {
  std::string name;
  if (!TakeFlag(args, "--instance", &name)) return true;
  if (Status st = ValidateInstanceName(name); !st.ok()) {
    std::fprintf(stderr, "marlaas %s: --instance: %s\n", command, st.message().c_str());
    return false;
  }
  *instance = name;
  return true;
}

bool TakeSwitch(std::vector<std::string>* args, const std::string& name) {
  for (size_t i = 0; i < args->size(); ++i) {
    if ((*args)[i] == name) {
      args->erase(args->begin() + long(i));
      return true;
    }
  }
  return false;
}

int RejectOptions(const char* command, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-') continue;
    const bool empty_value = a.back() == '=' || (i + 1 < args.size() && args[i + 1].empty());
    if (a.rfind("--", 0) == 0 && empty_value) {
      std::fprintf(stderr, "marlaas %s: %s is empty\n", command,
                   a.substr(0, a.back() == '=' ? a.size() - 1 : a.size()).c_str());
      return 2;
    }
    std::fprintf(stderr,
                 "marlaas %s: '%s' is not an option of this command, is given twice, or lacks its "
                 "value (see `marlaas %s --help`)\n",
                 command, a.c_str(), command);
    return 2;
  }
  return 0;
}

int RejectRest(const char* command, const std::vector<std::string>& args) {
  if (args.empty()) return 0;
  if (int rc = RejectOptions(command, args)) return rc;
  std::fprintf(stderr, "marlaas %s: unexpected argument '%s' (see `marlaas %s --help`)\n", command,
               args[0].c_str(), command);
  return 2;
}

int Main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    PrintHelp(stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : Commands()) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    std::vector<std::string> args(argv + 2, argv + argc);
    if (TakeSwitch(&args, "--help") || TakeSwitch(&args, "-h")) {
      std::printf("usage: marlaas %s %s\n  %s\n", c.name, c.args, c.summary);
      return 0;
    }
    return c.run(args);
  }
  std::fprintf(stderr, "marlaas: unknown command '%s'\n\n", argv[1]);
  PrintHelp(stderr);
  return 2;
}

}  // namespace marlaas::cli

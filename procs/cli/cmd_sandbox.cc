// `marlaas sandbox-check`: which isolation layers this host provides, then the escape suite on
// the spot. `marlaas sandbox-run [--lang python|sh] [--timeout-ms N] [--memory-mb N] FILE`: runs
// one file under exactly the isolation verifiers use and exits with a status naming the outcome.
#include <cstdio>
#include <cstdlib>

#include "base/file_util.h"
#include "procs/cli/cli.h"
#include "sandbox/escape_suite.h"
#include "sandbox/probe.h"
#include "sandbox/sandbox.h"

namespace marlaas::cli {

int RunSandboxCheck(const std::vector<std::string>& args) {
  if (int rc = RejectRest("sandbox-check", args)) return rc;
  const auto layers = sandbox::ProbeIsolation();
  std::printf("isolation layers:\n");
  for (const auto& l : layers) {
    // Where the layer has something to say (the cgroup version and place), also when it is
    // available.
    std::printf("  %-66s %s%s%s\n", l.name.c_str(), l.available ? "yes" : "NO",
                l.detail.empty() ? "" : ": ", l.detail.c_str());
  }
  const bool strong = sandbox::StrongIsolation(layers);
  std::printf("verdict: %s\n\nescape suite:\n",
              strong ? "full isolation available"
                     : "WEAK: a required layer is missing; the verifier refuses untrusted work "
                       "unless started with --allow-weak-sandbox");
  int contained = 0, total = 0;
  for (const auto& c : sandbox::EscapeSuite()) {
    const auto rep = sandbox::RunEscapeCase(c);
    ++total;
    contained += rep.contained;
    std::printf("  %-62s %-9s %7.0f ms%s%s\n", rep.name.c_str(),
                rep.contained ? "contained" : "ESCAPED", rep.wall_ms, rep.contained ? "" : "  ",
                rep.contained ? "" : rep.detail.c_str());
  }
  std::printf("%d of %d attacks contained\n", contained, total);
  return strong && contained == total ? 0 : 1;
}

int RunSandboxRun(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string lang = "python";
  long long timeout_ms = 2000, memory_mb = 256;
  const bool lang_given = TakeFlag(&args, "--lang", &lang);
  if (!TakeInteger(&args, "sandbox-run", "--timeout-ms", 1, 3600 * 1000, &timeout_ms) ||
      !TakeInteger(&args, "sandbox-run", "--memory-mb", 16, 1 << 20, &memory_mb)) {
    return 2;
  }
  if (int rc = RejectOptions("sandbox-run", args)) return rc;
  // Without --lang, a file named *.sh is a shell script (it ran as Python).
  if (!lang_given && args.size() == 1 && args[0].size() > 3 &&
      args[0].compare(args[0].size() - 3, 3, ".sh") == 0)
    lang = "sh";
  if (args.size() != 1 || (lang != "python" && lang != "sh")) {
    std::fprintf(stderr, "usage: marlaas sandbox-run %s\n%s\n", kSandboxRunArgs,
                 kSandboxRunStatuses);
    return 2;
  }
  auto code = ReadUserFile(args[0], 64 << 20);  // a pipe too: `sandbox-run /dev/stdin < x.py`
  if (!code.ok()) {
    std::fprintf(stderr, "marlaas sandbox-run: %s\n", code.status().message().c_str());
    return 2;
  }
  sandbox::SandboxRequest req;
  req.files = {{lang == "python" ? "main.py" : "main.sh", *code}};
  req.argv = lang == "python" ? std::vector<std::string>{"/usr/bin/python3", "-I", "-S", "main.py"}
                              : std::vector<std::string>{"/bin/sh", "main.sh"};
  req.limits.wall_timeout_ms = uint32_t(timeout_ms);
  req.limits.cpu_seconds = uint32_t((timeout_ms + 999) / 1000);
  req.limits.memory_bytes = uint64_t(memory_mb) << 20;
  auto res = sandbox::RunSandboxed(req);
  if (!res.ok()) {
    std::fprintf(stderr, "marlaas sandbox-run: %s\n", res.status().message().c_str());
    return 6;
  }
  std::fwrite(res->stdout_data.data(), 1, res->stdout_data.size(), stdout);
  std::fwrite(res->stderr_data.data(), 1, res->stderr_data.size(), stderr);
  std::fprintf(stderr, "[sandbox-run] outcome=%s exit=%d signal=%d wall_ms=%.1f%s%s%s\n",
               sandbox::SandboxOutcomeName(res->outcome), res->exit_code, res->signal, res->wall_ms,
               res->cgroup_limited ? "" : " no-cgroup-limits",
               res->stdout_truncated || res->stderr_truncated ? " output-truncated" : "",
               res->setup_error.empty() ? "" : (" setup-error=" + res->setup_error).c_str());
  switch (res->outcome) {
    case sandbox::SandboxOutcome::kExited:
      return res->exit_code == 0 ? 0 : 1;
    case sandbox::SandboxOutcome::kTimeout:
      return 3;
    case sandbox::SandboxOutcome::kSignaled:
      return sandbox::KilledByCpuLimit(*res) ? 3 : 4;
    case sandbox::SandboxOutcome::kOutputLimit:
      return 5;
    case sandbox::SandboxOutcome::kSetupFailed:
      return 6;
    case sandbox::SandboxOutcome::kMemoryLimit:
      return 7;
  }
  return 6;
}

}  // namespace marlaas::cli

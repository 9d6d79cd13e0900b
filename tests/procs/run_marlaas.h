// Runs the real `marlaas` binary of this build (MARLAAS_BIN_DIR) as an operator would: through
// the shell, stdout and stderr together, with its exit status.
#pragma once

#include <stdio.h>
#include <sys/wait.h>

#include <string>

namespace marlaas::testing {

struct CommandResult {
  int status = -1;  // exit status
  std::string output;
};

// Runs the build's program `name` with `args` through the shell, stdout and stderr together. A
// run past 300 s is killed (status 124 or 137), so that a command that hangs fails its test
// instead of hanging it.
inline CommandResult RunProgram(const std::string& name, const std::string& args) {
  CommandResult r;
  const std::string cmd =
      "timeout -k 5 300 " + std::string(MARLAAS_BIN_DIR) + "/" + name + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) r.output.append(buf, n);
  const int w = ::pclose(p);
  r.status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
  return r;
}

inline CommandResult RunMarlaas(const std::string& args) { return RunProgram("marlaas", args); }

}  // namespace marlaas::testing

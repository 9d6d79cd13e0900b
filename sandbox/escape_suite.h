// The escape suite: hostile programs, each with the check that it was contained and the host
// unharmed. The GoogleTest security tests and `marlaas sandbox-check` run the same cases, so an
// operator sees on the spot what CI sees.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "sandbox/sandbox.h"

namespace marlaas::sandbox {

struct EscapeCase {
  std::string name;  // identifier-safe, e.g. "fork_bomb"
  SandboxRequest request;
  // "" when the attack failed and the host is unharmed; otherwise what went wrong.
  std::function<std::string(const SandboxResult&)> contained;
};

std::vector<EscapeCase> EscapeSuite();

struct EscapeReport {
  std::string name;
  bool contained = false;
  std::string detail;
  double wall_ms = 0;
};
EscapeReport RunEscapeCase(const EscapeCase& c);

// Processes on the host whose command line contains `needle`.
int CountHostProcesses(const std::string& needle);

}  // namespace marlaas::sandbox

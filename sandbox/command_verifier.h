// A tenant's own verifier: a program (argv plus the files it needs, e.g. its script) run in the
// sandbox with {"prompt", "completion", "metadata"} as JSON on stdin. It must print one JSON
// object {"reward": x} with 0 <= x <= 1 on stdout. Anything else — a crash, a timeout, no or
// malformed output, a reward out of range — is a verifier error (OUTCOME_INFRA_ERROR, no reward),
// never a score for the candidate; such failures are retried up to `attempts` runs in all. A
// program that exits non-zero is reported with the end of its stderr (kVerifierStderrBytes), where
// its error's message is.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sandbox/sandbox.h"
#include "sandbox/verdict.h"

namespace marlaas::sandbox {

inline constexpr size_t kVerifierStderrBytes = 1000;

struct CommandVerifierSpec {
  std::vector<std::string> argv;  // e.g. {"/usr/bin/python3", "verify.py"}
  std::vector<std::pair<std::string, std::string>> files;
  SandboxLimits limits;
  int attempts = 2;
};

Verdict RunCommandVerifier(const CommandVerifierSpec& spec, const std::string& prompt,
                           const std::string& completion, const std::string& metadata_json);

}  // namespace marlaas::sandbox

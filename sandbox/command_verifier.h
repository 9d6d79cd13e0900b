// A tenant's own verifier: a program (argv plus the files it needs, e.g. its script) run in the
// sandbox with {"id", "prompt", "completion", "reference", "metadata"} as JSON on stdin (the
// dataset row's fields, the completion to judge, metadata as its JSON object). It must print one
// JSON object {"reward": x} with 0 <= x <= 1 on stdout. Anything else — a crash, a timeout, no or
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

struct CommandVerifierInput {
  std::string id, prompt, completion, reference;
  std::string metadata_json;  // an object's JSON ("" or "{}": none)
};

Verdict RunCommandVerifier(const CommandVerifierSpec& spec, const CommandVerifierInput& in);

}  // namespace marlaas::sandbox

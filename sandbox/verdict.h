// Verdict: what a verifier concluded about one candidate. An infrastructure failure (the sandbox
// could not run, a tenant's verifier broke its contract) is OUTCOME_INFRA_ERROR and carries no
// reward: callers must never train on it as a wrong answer.
#pragma once

#include <string>

#include "proto/marlaas.pb.h"

namespace marlaas::sandbox {

struct Verdict {
  pb::VerifierOutcome outcome = pb::OUTCOME_UNSCORED;
  double reward = 0;
  std::string detail;
  int attempts = 1;   // sandbox runs it took (infrastructure failures are retried)
  double cpu_ms = 0;  // CPU time of those runs (SandboxResult::cpu_ms, summed); 0 without any
  bool scored() const {
    return outcome != pb::OUTCOME_UNSCORED && outcome != pb::OUTCOME_INFRA_ERROR;
  }
};

}  // namespace marlaas::sandbox

// Checks a candidate Python function against hidden test cases, in the sandbox. The harness
// inside receives only the inputs; it prints each call's result as JSON (tagged with a per-run
// nonce) and the comparison with the expected outputs happens out here, so the expected values
// never enter the sandbox. A candidate that raises — on import or in any call — never passes,
// also when the expected output is None. Reward 1 when every case passes, else 0.
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
  SandboxLimits limits;
  int infra_attempts = 3;  // sandbox set-up failures are retried this many times in all
};

Verdict VerifyPythonFunction(const std::string& candidate_source, const PythonTestsSpec& spec);

}  // namespace marlaas::sandbox

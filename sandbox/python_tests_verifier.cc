#include "sandbox/python_tests_verifier.h"

#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace marlaas::sandbox {
namespace {

using json = nlohmann::json;

// Runs inside the sandbox as PID 1. The candidate's own prints are swallowed; results go to the
// real stdout, one tagged line per case, JSON-encoded by hand: importing the json module would
// cost ~6 ms per verification, a third of the whole run. INPUTS is spliced in as a literal.
constexpr const char kHarness[] = R"PY(
import io, sys
nonce, fname = sys.argv[1], sys.argv[2]
def enc(v):
    if v is None: return 'null'
    if v is True: return 'true'
    if v is False: return 'false'
    t = type(v)
    if t is int: return str(v)
    if t is float: return repr(v) if v == v and abs(v) != float('inf') else enc(repr(v))
    if t is str:
        out = []
        for c in v:
            o = ord(c)
            if c == '"' or c == '\\' or o < 32 or o > 126:
                if o > 0xFFFF:
                    o -= 0x10000
                    out.append('\\u%04x\\u%04x' % (0xD800 + (o >> 10), 0xDC00 + (o & 0x3FF)))
                else:
                    out.append('\\u%04x' % o)
            else:
                out.append(c)
        return '"' + ''.join(out) + '"'
    if t is list or t is tuple: return '[' + ','.join(enc(x) for x in v) + ']'
    if t is dict: return '{' + ','.join(enc(str(k)) + ':' + enc(x) for k, x in v.items()) + '}'
    return enc(repr(v))
out = sys.stdout
def report(key, value, i=-1):
    out.write('%s %d {"%s":%s}\n' % (nonce, i, key, enc(value)))
    out.flush()
try:
    sys.stdout = io.StringIO()
    ns = {'__name__': 'candidate'}
    exec(compile(open('candidate.py').read(), 'candidate.py', 'exec'), ns)
    fn = ns[fname]
except BaseException as e:
    sys.stdout = out
    report('load_error', type(e).__name__)
    sys.exit(0)
for i, args in enumerate(INPUTS):
    try:
        sys.stdout = io.StringIO()
        value = fn(*args)
        sys.stdout = out
        report('value', value, i)
    except BaseException as e:
        sys.stdout = out
        report('error', type(e).__name__, i)
)PY";

// A JSON value as a Python literal (JSON strings are valid Python string literals).
std::string PythonLiteral(const json& v) {
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + PythonLiteral(v[i]);
    return s + "]";
  }
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false) {
      s += (first ? "" : ",") + json(it.key()).dump() + ":" + PythonLiteral(it.value());
    }
    return s + "}";
  }
  return v.dump();  // numbers and strings
}

std::string Nonce() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << rd() << rd();
  return s.str();
}

Verdict Judge(const SandboxResult& r, const std::string& nonce, const PythonTestsSpec& spec) {
  Verdict v;
  switch (r.outcome) {
    case SandboxOutcome::kTimeout:
      v.outcome = pb::OUTCOME_TIMEOUT;
      v.detail = "timed out";
      return v;
    case SandboxOutcome::kOutputLimit:
      v.outcome = pb::OUTCOME_OUTPUT_LIMIT;
      v.detail = "output limit";
      return v;
    case SandboxOutcome::kMemoryLimit:
      v.outcome = pb::OUTCOME_MEMORY_LIMIT;
      v.detail = "memory limit (the run's cgroup)";
      return v;
    case SandboxOutcome::kSignaled:
      v.outcome = KilledByCpuLimit(r) ? pb::OUTCOME_TIMEOUT : pb::OUTCOME_RUNTIME_ERROR;
      v.detail = "killed by signal " + std::to_string(r.signal) +
                 (KilledByCpuLimit(r) ? " (CPU limit)" : " (the candidate crashed)");
      return v;
    case SandboxOutcome::kSetupFailed:
      v.outcome = pb::OUTCOME_INFRA_ERROR;
      v.detail = "sandbox: " + r.setup_error;
      return v;
    case SandboxOutcome::kExited:
      break;
  }
  std::vector<json> results(spec.tests.size());
  std::istringstream lines(r.stdout_data);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, nonce.size() + 1, nonce + " ") != 0) continue;
    std::istringstream fields(line.substr(nonce.size() + 1));
    int index = -2;
    fields >> index;
    std::string rest;
    std::getline(fields, rest);
    json obj = json::parse(rest, nullptr, false);
    if (obj.is_discarded()) continue;
    if (index == -1 && obj.contains("load_error")) {
      v.outcome =
          obj["load_error"] == "MemoryError" ? pb::OUTCOME_MEMORY_LIMIT : pb::OUTCOME_RUNTIME_ERROR;
      v.detail = "candidate did not load: " + obj["load_error"].get<std::string>();
      return v;
    }
    if (index >= 0 && size_t(index) < results.size()) results[size_t(index)] = obj;
  }
  int passed = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const json& res = results[i];
    if (res.is_null()) {
      v.outcome = pb::OUTCOME_RUNTIME_ERROR;
      v.detail = "case " + std::to_string(i) + " produced no result (the candidate exited early)";
      return v;
    }
    if (res.contains("error")) {
      v.outcome =
          res["error"] == "MemoryError" ? pb::OUTCOME_MEMORY_LIMIT : pb::OUTCOME_RUNTIME_ERROR;
      v.detail = "case " + std::to_string(i) + " raised " + res["error"].get<std::string>();
      return v;
    }
    const json expected = json::parse(spec.tests[i].expected_json, nullptr, false);
    if (res.contains("value") && res["value"] == expected) ++passed;
  }
  v.outcome = passed == int(results.size()) ? pb::OUTCOME_OK : pb::OUTCOME_WRONG_ANSWER;
  v.reward = v.outcome == pb::OUTCOME_OK ? 1.0 : 0.0;
  v.detail = std::to_string(passed) + "/" + std::to_string(results.size()) + " cases passed";
  return v;
}

}  // namespace

Verdict VerifyPythonFunction(const std::string& candidate, const PythonTestsSpec& spec) {
  json inputs = json::array();
  for (const PythonTestCase& t : spec.tests) {
    json args = json::parse(t.args_json, nullptr, false);
    if (args.is_discarded() || !args.is_array() ||
        json::parse(t.expected_json, nullptr, false).is_discarded()) {
      Verdict v;
      v.outcome = pb::OUTCOME_INFRA_ERROR;
      v.detail = "a hidden test case is not valid JSON";
      return v;
    }
    inputs.push_back(args);
  }
  Verdict v;
  double cpu_ms = 0;
  for (int attempt = 1; attempt <= std::max(1, spec.infra_attempts); ++attempt) {
    const std::string nonce = Nonce();
    SandboxRequest req;
    req.argv = {"/usr/bin/python3", "-I", "-S", "harness.py", nonce, spec.function_name};
    req.files = {{"harness.py", "INPUTS = " + PythonLiteral(inputs) + "\n" + kHarness},
                 {"candidate.py", candidate}};
    req.limits = spec.limits;
    auto r = RunSandboxed(req);
    if (!r.ok()) {
      v.outcome = pb::OUTCOME_INFRA_ERROR;
      v.detail = r.status().ToString();
    } else {
      v = Judge(*r, nonce, spec);
      cpu_ms += r->cpu_ms;
    }
    v.attempts = attempt;
    v.cpu_ms = cpu_ms;
    if (v.outcome != pb::OUTCOME_INFRA_ERROR) break;
  }
  return v;
}

}  // namespace marlaas::sandbox

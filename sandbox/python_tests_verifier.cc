#include "sandbox/python_tests_verifier.h"

#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace marlaas::sandbox {
namespace {

using json = nlohmann::json;

// Runs inside the sandbox as PID 1 and forks one process per candidate (python_tests_verifier.h).
// CHECKS (function name and inputs per candidate) is spliced in as a literal; candidate i's source
// is c<i>.py. To the real stdout, per candidate: "<nonce> <i> start", its results as
// "<nonce> <i> case <index> {json}" (the last per index; index -1 is a load error), then
// "<nonce> <i> end {...}" with how its process ended. Exit status 3: the harness broke. Results
// are JSON-encoded by hand: importing the json module would cost ~6 ms per run.
constexpr const char kHarness[] = R"PY(
import os, sys, select, time, gc, _signal, _ctypes
_signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # (the signal module imports enum: +7 ms)
class Int(_ctypes._SimpleCData):  # prctl through _ctypes: the ctypes package costs 2 ms more
    _type_ = 'i'
class CFunc(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL
    _restype_ = Int
class Libc:
    _handle = _ctypes.dlopen(None)
if CFunc(('prctl', Libc()))(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0: out of candidates' reach
    sys.stderr.write('harness: prctl(PR_SET_DUMPABLE) failed\n')
    sys.exit(3)
nonce, wall, cap = sys.argv[1], int(sys.argv[2]) / 1000.0, int(sys.argv[3])
sources = []
for i in range(len(CHECKS)):
    with open('c%d.py' % i, 'rb') as f:
        sources.append(f.read())
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
def emit(c, text):
    out.write('%s %d %s\n' % (nonce, c, text))
    out.flush()
def candidate(c, w):
    try:
        null = os.open('/dev/null', os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, w)
        os.closerange(w + 1, 1 << 16)
        fname, inputs = CHECKS[c]
        src = sources[c]
        del sources[:]
        def report(key, value, i=-1):
            line = ('%d {"%s":%s}\n' % (i, key, enc(value))).encode()
            while line:
                line = line[os.write(w, line):]
        try:
            ns = {'__name__': 'candidate'}
            exec(compile(src, 'candidate.py', 'exec'), ns)
            fn = ns[fname]
        except BaseException as e:
            report('load_error', type(e).__name__)
            os._exit(0)
        for i, args in enumerate(inputs):
            try:
                report('value', fn(*args), i)
            except BaseException as e:
                report('error', type(e).__name__, i)
    finally:
        os._exit(0)
def waited(pid):  # seconds the process was ready to run but waiting for a CPU
    try:
        with open('/proc/%d/schedstat' % pid) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0
def supervise(pid, r):
    start = time.monotonic()
    end = start + wall
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pfd = -1
    data, size, status, ended = [], 0, None, False
    while status is None:
        left = end - time.monotonic()
        if left <= 0:
            # The wall clock does not count waiting for a CPU (a busy machine is not the
            # candidate's fault), up to 4x the limit in all; the CPU limit still holds.
            end = min(start + wall + waited(pid), start + 4 * wall)
            if end - time.monotonic() > 0.001:
                continue
            status = '{"timeout":1}'
            break
        fds = ([r] if r >= 0 else []) + ([pfd] if pfd >= 0 else [])
        ready = select.select(fds, [], [], left if pfd >= 0 else min(left, 0.001))[0]
        if r >= 0 and r in ready:
            b = os.read(r, 65536)
            if not b:
                os.close(r)
                r = -1
            size += len(b)
            data.append(b)
            if size > cap:
                status = '{"output_limit":1}'
            continue
        if pfd < 0 or pfd in ready:
            wpid, ws, ru = os.wait4(pid, os.WNOHANG)
            if wpid == pid:
                ended = True
                cpu = '"cpu_ms":%.3f' % ((ru.ru_utime + ru.ru_stime) * 1e3)
                if os.WIFSIGNALED(ws):
                    status = '{"signaled":%d,%s}' % (os.WTERMSIG(ws), cpu)
                else:
                    status = '{"exited":%d,%s}' % (os.WEXITSTATUS(ws), cpu)
    if r >= 0 and ended:  # what it wrote before it ended
        os.set_blocking(r, False)
        try:
            while size <= cap:
                b = os.read(r, 65536)
                if not b:
                    break
                size += len(b)
                data.append(b)
        except BlockingIOError:
            pass
        if size > cap:
            status = '{"output_limit":1}'
    for fd in (r, pfd):
        if fd >= 0:
            os.close(fd)
    return b''.join(data), status
def clear():
    give_up = time.monotonic() + 2
    while True:
        try:
            os.kill(-1, 9)
        except ProcessLookupError:
            break
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.0005)
    stack = ['/work']  # depth-first without recursion: a tree may be ~1000 deep
    while stack:
        path = stack[-1]
        os.chmod(path, 0o700)
        with os.scandir(path) as it:
            entries = list(it)
        subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                os.unlink(e.path)
        if subdirs:
            stack.extend(subdirs)
        else:
            stack.pop()
            if path != '/work':
                os.rmdir(path)
    os.chmod('/work', 0o777)
try:
    for i in range(len(sources)):
        os.unlink('c%d.py' % i)
    os.unlink('harness.py')
    # Paid once here rather than in every child: compile()'s first call costs ~2 ms (the
    # children's compile then takes 0.2 ms), and what exists now stays out of the collector, so
    # fewer of its pages are copied into each child.
    exec(compile(b'def warm(x):\n    return [x, -x]\n', 'warm.py', 'exec'), {})
    enc([0, 'a', 1.5, None, True, (1,), {'k': 1}])
    gc.freeze()
    for c in range(len(CHECKS)):
        emit(c, 'start')
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            candidate(c, w)
        os.close(w)
        data, status = supervise(pid, r)
        last = {}
        for line in data.decode('utf-8', 'replace').split('\n')[:-1]:
            i, _, rest = line.partition(' ')
            if i.lstrip('-').isdigit() and rest.startswith('{'):
                last[int(i)] = rest
        for i in sorted(last):
            emit(c, 'case %d %s' % (i, last[i]))
        emit(c, 'end ' + status)  # judged before the clean-up: what it left cannot change it
        if status.startswith('{"signaled":9,'):
            sys.exit(0)  # the run's cgroup tells the CPU limit from the memory limit
        clear()
except SystemExit:
    raise
except BaseException as e:
    sys.stderr.write('harness: %s: %s\n' % (type(e).__name__, e))
    sys.exit(3)
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

// What the harness reported about one candidate.
struct CandidateReport {
  bool started = false, ended = false;
  json end;                                 // with `ended`: how its process ended
  std::vector<std::pair<int, json>> cases;  // index (-1: load error), result object
};

std::vector<CandidateReport> ParseReports(const std::string& out, const std::string& nonce,
                                          size_t n) {
  std::vector<CandidateReport> reports(n);
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, nonce.size() + 1, nonce + " ") != 0) continue;
    std::istringstream fields(line.substr(nonce.size() + 1));
    long c = -1;
    std::string kind;
    fields >> c >> kind;
    if (c < 0 || size_t(c) >= n) continue;
    CandidateReport& rep = reports[size_t(c)];
    std::string rest;
    if (kind == "start") {
      rep.started = true;
    } else if (kind == "case") {
      int index = -2;
      fields >> index;
      std::getline(fields, rest);
      json obj = json::parse(rest, nullptr, false);
      if (!obj.is_discarded() && obj.is_object()) rep.cases.emplace_back(index, std::move(obj));
    } else if (kind == "end") {
      std::getline(fields, rest);
      json obj = json::parse(rest, nullptr, false);
      if (!obj.is_discarded() && obj.is_object()) {
        rep.ended = true;
        rep.end = std::move(obj);
      }
    }
  }
  return reports;
}

// A verdict from how the candidate's process ended (as a sandbox outcome) and its results.
Verdict Judge(SandboxOutcome outcome, int signal, const std::string& setup_error,
              const CandidateReport& rep, const PythonCandidate& cand) {
  Verdict v;
  switch (outcome) {
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
    case SandboxOutcome::kSignaled: {
      SandboxResult r;
      r.outcome = outcome;
      r.signal = signal;
      v.outcome = KilledByCpuLimit(r) ? pb::OUTCOME_TIMEOUT : pb::OUTCOME_RUNTIME_ERROR;
      v.detail = "killed by signal " + std::to_string(signal) +
                 (KilledByCpuLimit(r) ? " (CPU limit)" : " (the candidate crashed)");
      return v;
    }
    case SandboxOutcome::kSetupFailed:
      v.outcome = pb::OUTCOME_INFRA_ERROR;
      v.detail = "sandbox: " + setup_error;
      return v;
    case SandboxOutcome::kExited:
      break;
  }
  std::vector<json> results(cand.tests.size());
  for (const auto& [index, obj] : rep.cases) {
    if (index == -1 && obj.contains("load_error") && obj["load_error"].is_string()) {
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
      v.detail = "case " + std::to_string(i) + " raised " +
                 (res["error"].is_string() ? res["error"].get<std::string>() : res["error"].dump());
      return v;
    }
    const json expected = json::parse(cand.tests[i].expected_json, nullptr, false);
    if (res.contains("value") && res["value"] == expected) ++passed;
  }
  v.outcome = passed == int(results.size()) ? pb::OUTCOME_OK : pb::OUTCOME_WRONG_ANSWER;
  v.reward = v.outcome == pb::OUTCOME_OK ? 1.0 : 0.0;
  v.detail = std::to_string(passed) + "/" + std::to_string(results.size()) + " cases passed";
  return v;
}

// How a candidate the harness saw to the end ended, as a sandbox outcome. A SIGKILL ended the
// run (the harness stops there), so the run's cgroup says whether it was the memory limit.
SandboxOutcome EndedAs(const json& end, const SandboxResult& run, int* signal) {
  if (end.contains("timeout")) return SandboxOutcome::kTimeout;
  if (end.contains("output_limit")) return SandboxOutcome::kOutputLimit;
  if (end.contains("signaled") && end["signaled"].is_number_integer()) {
    *signal = end["signaled"].get<int>();
    if (*signal == 9 && run.outcome == SandboxOutcome::kMemoryLimit) {
      return SandboxOutcome::kMemoryLimit;
    }
    return SandboxOutcome::kSignaled;
  }
  return SandboxOutcome::kExited;  // its exit status does not matter: its results do
}

}  // namespace

std::vector<Verdict> VerifyPythonFunctions(const std::vector<PythonCandidate>& candidates,
                                           const SandboxLimits& limits, int infra_attempts) {
  const size_t n = candidates.size();
  std::vector<Verdict> verdicts(n);
  // Inputs as Python literals; a malformed hidden test is the task's fault, never a reward.
  std::vector<std::string> checks(n);
  std::vector<bool> valid(n, true);
  for (size_t c = 0; c < n; ++c) {
    json inputs = json::array();
    for (const PythonTestCase& t : candidates[c].tests) {
      json args = json::parse(t.args_json, nullptr, false);
      if (args.is_discarded() || !args.is_array() ||
          json::parse(t.expected_json, nullptr, false).is_discarded()) {
        valid[c] = false;
        break;
      }
      inputs.push_back(args);
    }
    if (!valid[c]) {
      verdicts[c].outcome = pb::OUTCOME_INFRA_ERROR;
      verdicts[c].detail = "a hidden test case is not valid JSON";
    } else {
      checks[c] =
          "(" + json(candidates[c].function_name).dump() + ", " + PythonLiteral(inputs) + ")";
    }
  }
  std::vector<size_t> pending;  // valid candidates not judged yet, in order
  for (size_t c = 0; c < n; ++c) {
    if (valid[c]) pending.push_back(c);
  }
  int failed_runs = 0;
  while (!pending.empty()) {
    const std::string nonce = Nonce();
    SandboxRequest req;
    req.limits = limits;
    // The run's own limits hold all of its candidates; each candidate's are the caller's.
    const uint64_t per = uint64_t(pending.size());
    req.limits.wall_timeout_ms = uint32_t(
        std::min<uint64_t>(UINT32_MAX, per * (4 * uint64_t(limits.wall_timeout_ms) + 200) + 2000));
    size_t max_cases = 0;
    std::string list = "CHECKS = [";
    for (size_t k = 0; k < pending.size(); ++k) {
      const size_t c = pending[k];
      list += checks[c] + ",";
      max_cases = std::max(max_cases, candidates[c].tests.size());
      req.files.emplace_back("c" + std::to_string(k) + ".py", candidates[c].source);
    }
    req.limits.max_output_bytes = per * (limits.max_output_bytes + 64 * (max_cases + 4)) + 4096;
    req.limits.max_processes = limits.max_processes + 1;  // the harness
    req.files.emplace_back("harness.py", list + "]\n" + kHarness);
    req.argv = {"/usr/bin/python3",
                "-I",
                "-S",
                "harness.py",
                nonce,
                std::to_string(limits.wall_timeout_ms),
                std::to_string(limits.max_output_bytes)};
    auto r = RunSandboxed(req);
    std::vector<size_t> judged;
    std::string failure;
    if (!r.ok()) {
      failure = r.status().ToString();
    } else if (r->outcome == SandboxOutcome::kSetupFailed) {
      failure = "sandbox: " + r->setup_error;
    } else {
      const std::vector<CandidateReport> reports = ParseReports(r->stdout_data, nonce, per);
      const bool harness_broke = r->outcome == SandboxOutcome::kExited && r->exit_code != 0;
      for (size_t k = 0; k < pending.size(); ++k) {
        const CandidateReport& rep = reports[k];
        const PythonCandidate& cand = candidates[pending[k]];
        if (rep.ended) {
          int signal = 0;
          const SandboxOutcome how = EndedAs(rep.end, *r, &signal);
          verdicts[pending[k]] = Judge(how, signal, "", rep, cand);
        } else if (rep.started && !harness_broke) {
          // The run ended while this candidate ran: the run's end is its end.
          verdicts[pending[k]] = Judge(r->outcome, r->signal, r->setup_error, rep, cand);
        } else {
          break;
        }
        judged.push_back(pending[k]);
      }
      if (judged.empty()) {
        failure = harness_broke ? "the harness failed: " + r->stderr_data.substr(0, 200)
                                : "the run judged no candidate";
      }
    }
    if (judged.empty()) {
      ++failed_runs;
      if (failed_runs >= std::max(1, infra_attempts)) {
        for (size_t c : pending) {
          verdicts[c].outcome = pb::OUTCOME_INFRA_ERROR;
          verdicts[c].detail = failure;
          verdicts[c].attempts = failed_runs;
        }
        break;
      }
      continue;
    }
    if (r->outcome == SandboxOutcome::kMemoryLimit) {
      // The run's cgroup killed a process at its memory limit, which may have been a process a
      // candidate left running, not its own: as in a run of its own, that candidate's verdict is
      // the memory limit. One candidate judged: it; several: each is run again alone to tell.
      if (judged.size() == 1) {
        verdicts[judged[0]] = Judge(SandboxOutcome::kMemoryLimit, 0, "", {}, candidates[judged[0]]);
      } else {
        for (size_t c : judged) {
          verdicts[c] = VerifyPythonFunctions({candidates[c]}, limits, infra_attempts)[0];
          verdicts[c].cpu_ms += r->cpu_ms / double(judged.size());
        }
        pending.erase(pending.begin(), pending.begin() + long(judged.size()));
        continue;
      }
    }
    const double share = r->cpu_ms / double(judged.size());
    for (size_t c : judged) {
      verdicts[c].cpu_ms = share;
      verdicts[c].attempts = failed_runs + 1;
    }
    pending.erase(pending.begin(), pending.begin() + long(judged.size()));
  }
  return verdicts;
}

Verdict VerifyPythonFunction(const std::string& candidate, const PythonTestsSpec& spec) {
  PythonCandidate c{candidate, spec.function_name, spec.tests};
  return VerifyPythonFunctions({c}, spec.limits, spec.infra_attempts)[0];
}

}  // namespace marlaas::sandbox

#include "sandbox/python_tests_verifier.h"

#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

namespace marlaas::sandbox {
namespace {

using json = nlohmann::json;

// Runs inside the sandbox as PID 1 and forks one process per candidate (python_tests_verifier.h).
// stdin: the run's key (kKeyBytes bytes), then per candidate "<name bytes> <inputs bytes>
// <source bytes>\n" and those bytes (the function's name, its inputs as a Python literal, its
// source), read one candidate at a time. stdout: the harness's frames, each a line of its own
// starting with the key ("<key> S <c>": candidate c starts; "<key> E <c> {...}": how its process
// ended; "<key> R": the sandbox is not fresh enough for another candidate, the rest go to a new
// run), and between S and E what candidate c wrote itself ("<case> {json}" lines, -1 for a load
// error). Exit status 3: the harness broke.
//
// A candidate's process gets the stdout but not the key (its copy of the key's buffer is zeroed
// before any of its code runs), so it cannot forge a frame. What it can change of that shared
// stdout (its flags: O_NONBLOCK made the next candidates' results fail to be written; the pipe's
// size) is put back once its processes are gone, or the rest go to a new run. The harness never
// reads a result, and a source only passes through a buffer it zeroes; the next sources are still
// in the kernel's socket buffer: nothing of an earlier candidate's code or results is in the memory
// a later one starts with. Results are JSON-encoded by hand: importing the json module costs ~6 ms
// a run.
constexpr size_t kKeyBytes = 32;
constexpr const char kHarness[] = R"PY(
import os, sys, select, time, gc, resource, fcntl, _signal, _ctypes
_signal.signal(_signal.SIGINT, _signal.SIG_IGN)  # (the signal module imports enum: +7 ms)
class Int(_ctypes._SimpleCData):  # prctl through _ctypes: the ctypes package costs 2 ms more
    _type_ = 'i'
class CFunc(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL
    _restype_ = Int
class Libc:
    _handle = _ctypes.dlopen(None)
prctl = CFunc(('prctl', Libc()))
if prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE 0: out of candidates' reach
    sys.stderr.write('harness: prctl(PR_SET_DUMPABLE) failed\n')
    sys.exit(3)
wall, cpu = int(sys.argv[1]) / 1000.0, int(sys.argv[2])
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
def readn(n):  # straight into a bytearray: no other copy of the bytes in this process
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(0, [view[got:]])
        if k == 0:
            raise EOFError('stdin ended inside a frame')
        got += k
    return buf
key = readn(int(sys.argv[3]))
def frame(text):  # a line of its own: what a candidate wrote last may not end in a newline
    parts = [b'\n', key, b' ' + text + b'\n']
    while parts:
        try:
            k = os.writev(1, parts)
        except BlockingIOError:  # stdout made non-blocking by what a candidate left running
            select.select([], [1], [])
            continue
        while parts and k >= len(parts[0]):
            k -= len(parts[0])
            parts.pop(0)
        if parts:
            parts[0] = memoryview(parts[0])[k:]
def header():
    line = b''
    while not line.endswith(b'\n'):
        b = os.read(0, 1)
        if not b:
            return None
        line += b
    return [int(x) for x in line.split()]
def candidate(src, fname, inputs):
    try:
        key[:] = bytes(len(key))
        # Dumpable again, hence in the harness's sight under /proc's hidepid (waited() reads
        # its schedstat); the copy of the harness's memory it holds has nothing left to hide.
        if prctl(4, 1, 0, 0, 0) != 0:
            os._exit(0)
        os.setsid()  # a session, and scheduler autogroup, of its own
        null = os.open('/dev/null', os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 2)
        os.closerange(3, 1 << 16)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        code = bytes(src)
        src[:] = bytes(len(src))
        def report(kind, value, i=-1):
            line = ('%d {"%s":%s}\n' % (i, kind, enc(value))).encode()
            while line:
                line = line[os.write(1, line):]
        sys.stdout = sys.stderr = open(os.devnull, 'w')  # its prints go nowhere
        try:
            ns = {'__name__': 'candidate'}
            exec(compile(code, 'candidate.py', 'exec'), ns)
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
def stat(pid):  # threads, CPU seconds of all its threads, of its reaped children
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    tick = os.sysconf('SC_CLK_TCK')
    return (int(fields[17]), (int(fields[11]) + int(fields[12])) / tick,
            (int(fields[13]) + int(fields[14])) / tick)
def waited(pid):
    # Seconds the candidate was ready to run but waiting for a CPU: credited only to a candidate
    # that ran as one thread of one process, so that it cannot make its own contention. The
    # namespace's last pid is still its own if it started no thread or process (a descendant
    # that made itself non-dumpable would be hidden from /proc's listing, not from this); a
    # kernel without ns_last_pid (no CONFIG_CHECKPOINT_RESTORE) leaves only the listing.
    try:
        threads, used, reaped = stat(pid)
        try:
            with open('/proc/sys/kernel/ns_last_pid') as f:
                forked = int(f.read()) != pid
        except OSError:
            forked = any(p.isdigit() and p not in ('1', str(pid)) for p in os.listdir('/proc'))
        with open('/proc/%d/schedstat' % pid) as f:
            own, delay = [int(x) / 1e9 for x in f.read().split()[:2]]
        if threads != 1 or reaped > 0 or forked or used > own + 0.03:
            return 0.0
        return delay
    except (OSError, ValueError, IndexError):
        return 0.0
def ended(ws, ru):
    cpu_ms = '"cpu_ms":%.3f' % ((ru.ru_utime + ru.ru_stime) * 1e3)
    if os.WIFSIGNALED(ws):
        return '{"signaled":%d,%s}' % (os.WTERMSIG(ws), cpu_ms)
    return '{"exited":%d,%s}' % (os.WEXITSTATUS(ws), cpu_ms)
def supervise(pid):
    start = time.monotonic()
    end = start + wall
    try:
        pfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pfd = -1
    nap = 0.0005
    while True:
        wpid, ws, ru = os.wait4(pid, os.WNOHANG)
        if wpid == pid:
            break
        left = end - time.monotonic()
        if left <= 0:
            # The wall clock does not count waiting for a CPU (a busy machine is not the
            # candidate's fault), up to 4x the limit in all; the CPU limit still holds.
            end = min(start + wall + waited(pid), start + 4 * wall)
            if end - time.monotonic() > 0.001:
                continue
            if pfd >= 0:
                os.close(pfd)
            return '{"timeout":1}'
        if pfd >= 0:
            select.select([pfd], [], [], left)
        else:
            time.sleep(min(left, nap))
            nap = min(nap * 2, 0.005)
    if pfd >= 0:
        os.close(pfd)
    return ended(ws, ru)
def kill_all():  # every process but this one (PID 1: they are all ours to reap); False: gave up
    give_up = time.monotonic() + 2
    while time.monotonic() < give_up:
        try:
            os.kill(-1, 9)
        except ProcessLookupError:
            return True
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                time.sleep(0.0002)
        except ChildProcessError:
            time.sleep(0.0005)
    return False
def wipe():
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
limits = (resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_FSIZE,
          resource.RLIMIT_NOFILE, resource.RLIMIT_CORE)
# The stdout every candidate shares with the harness: its flags (O_NONBLOCK would make the next
# candidates' results fail to be written), its owner and signal for O_ASYNC, the pipe's size.
F_SETSIG, F_GETSIG, F_SETPIPE_SZ, F_GETPIPE_SZ = 10, 11, 1031, 1032
def stdout_state():
    return (fcntl.fcntl(1, fcntl.F_GETFL), fcntl.fcntl(1, fcntl.F_GETOWN),
            fcntl.fcntl(1, F_GETSIG), fcntl.fcntl(1, F_GETPIPE_SZ))
def restore_stdout():  # once no process of the candidate is left; what fails shows in state()
    flags, owner, sig, size = fresh[0]
    for cmd, value in ((fcntl.F_SETFL, flags), (fcntl.F_SETOWN, owner), (F_SETSIG, sig),
                       (F_SETPIPE_SZ, size)):
        try:
            fcntl.fcntl(1, cmd, value)
        except OSError:
            pass
def state():  # what a candidate could change for the next one, if anything let it
    with open('/proc/self/oom_score_adj') as f:
        oom = f.read()
    try:
        with open('/proc/self/autogroup') as f:
            group = f.read().split()[-1]
    except OSError:
        group = None
    return (stdout_state(), oom, group, os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getaffinity(0), [resource.getrlimit(l) for l in limits])
def one(c):  # runs candidate c; False: the rest need a fresh sandbox
    sizes = header()
    if sizes is None:
        return False
    fname = readn(sizes[0]).decode()
    inputs = eval(readn(sizes[1]).decode(), {'__builtins__': {}})
    src = readn(sizes[2])
    frame(b'S %d' % c)
    pid = os.fork()
    if pid == 0:
        candidate(src, fname, inputs)
    src[:] = bytes(len(src))
    status = supervise(pid)
    clean = kill_all()  # before its end is told: nothing it left may add to its results
    if clean:
        restore_stdout()
    frame(('E %d %s' % (c, status)).encode())
    if status.startswith('{"signaled":9,'):
        return False  # the run's cgroup tells the CPU limit from the memory limit
    if not clean:
        frame(b'R')
        return False
    wipe()
    if state() != fresh:
        frame(b'R')
        return False
    return True
try:
    os.unlink('harness.py')
    # Paid once here rather than in every child: compile()'s first call costs ~2 ms (the
    # children's compile then takes 0.2 ms), and what exists now stays out of the collector, so
    # fewer of its pages are copied into each child.
    exec(compile(b'def warm(x):\n    return [x, -x]\n', 'warm.py', 'exec'), {})
    enc([0, 'a', 1.5, None, True, (1,), {'k': 1}])
    fresh = state()
    gc.freeze()
    c = 0
    while one(c):
        c += 1
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

// What the harness reported about one candidate.
struct CandidateReport {
  bool started = false, ended = false;
  json end;          // with `ended`: how its process ended
  std::string data;  // what it wrote between its start and its end
};

// The harness's stdout (kHarness): frames are the lines that start with the run's key; what
// comes between "S <c>" and "E <c>" is candidate c's.
std::vector<CandidateReport> ParseRun(const std::string& out, const std::string& key, size_t n) {
  std::vector<CandidateReport> reports(n);
  CandidateReport* current = nullptr;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t eol = out.find('\n', pos);
    if (eol == std::string::npos) eol = out.size();
    const size_t len = eol - pos;
    if (len > key.size() && out.compare(pos, key.size(), key) == 0 &&
        out[pos + key.size()] == ' ') {
      std::istringstream fields(out.substr(pos + key.size() + 1, len - key.size() - 1));
      std::string kind;
      long c = -1;
      fields >> kind >> c;
      if (fields && c >= 0 && size_t(c) < n) {
        if (kind == "S") {
          reports[size_t(c)].started = true;
          current = &reports[size_t(c)];
        } else if (kind == "E") {
          std::string rest;
          std::getline(fields, rest);
          json obj = json::parse(rest, nullptr, false);
          if (!obj.is_discarded() && obj.is_object()) {
            reports[size_t(c)].ended = true;
            reports[size_t(c)].end = std::move(obj);
          }
          current = nullptr;
        }
      }
    } else if (current != nullptr) {
      current->data.append(out, pos, std::min(out.size(), eol + 1) - pos);
    }
    pos = eol + 1;
  }
  return reports;
}

// A fresh random key per run: the frames the harness writes start with it.
std::string RunKey() {
  std::random_device rd;
  std::string key;
  static const char kHex[] = "0123456789abcdef";
  while (key.size() < kKeyBytes) {
    const uint32_t word = rd();
    for (int shift = 0; shift < 32 && key.size() < kKeyBytes; shift += 4) {
      key += kHex[(word >> shift) & 15];
    }
  }
  return key;
}

// Nesting depth of a JSON text (brackets outside strings): a candidate writes its own result
// lines, and copying or printing a deeply nested value recurses.
int JsonDepth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

// A verdict from how the candidate's process ended (as a sandbox outcome) and what it wrote:
// "<case> {json}" lines, the last one per case counting.
Verdict Judge(SandboxOutcome outcome, int signal, const std::string& setup_error,
              const std::string& data, const PythonCandidate& cand) {
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
  std::istringstream lines(data);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    long index = 0;
    std::string rest;
    if (!(fields >> index) || !std::getline(fields, rest)) continue;
    // The harness's encoder stops at Python's recursion limit (~1000 levels).
    if (JsonDepth(rest) > 2000) continue;
    json obj = json::parse(rest, nullptr, false);
    if (obj.is_discarded() || !obj.is_object()) continue;
    if (index == -1 && obj.contains("load_error") && obj["load_error"].is_string()) {
      v.outcome =
          obj["load_error"] == "MemoryError" ? pb::OUTCOME_MEMORY_LIMIT : pb::OUTCOME_RUNTIME_ERROR;
      v.detail = "candidate did not load: " + obj["load_error"].get<std::string>();
      return v;
    }
    if (index >= 0 && size_t(index) < results.size()) results[size_t(index)] = std::move(obj);
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
                 (res["error"].is_string() ? res["error"].get<std::string>() : "?");
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
  // Each candidate's stdin frame: its function's name, inputs (a Python literal) and source. A
  // malformed hidden test is the task's fault, never a reward.
  std::vector<std::string> frames(n);
  std::vector<size_t> pending;  // candidates not judged yet, in order
  for (size_t c = 0; c < n; ++c) {
    json inputs = json::array();
    bool valid = true;
    for (const PythonTestCase& t : candidates[c].tests) {
      json args = json::parse(t.args_json, nullptr, false);
      if (args.is_discarded() || !args.is_array() ||
          json::parse(t.expected_json, nullptr, false).is_discarded()) {
        valid = false;
        break;
      }
      inputs.push_back(args);
    }
    if (!valid) {
      verdicts[c].outcome = pb::OUTCOME_INFRA_ERROR;
      verdicts[c].detail = "a hidden test case is not valid JSON";
      continue;
    }
    const std::string& name = candidates[c].function_name;
    const std::string literal = PythonLiteral(inputs), &src = candidates[c].source;
    frames[c] = std::to_string(name.size()) + " " + std::to_string(literal.size()) + " " +
                std::to_string(src.size()) + "\n" + name + literal + src;
    pending.push_back(c);
  }
  int failed_runs = 0;     // in a row, without a verdict
  double unbilled_ms = 0;  // CPU time of those runs
  // A run that judged nothing; false once infra_attempts of them in a row have made every
  // candidate still pending an infrastructure error.
  auto retry = [&](const std::string& failure, double cpu_ms) {
    unbilled_ms = cpu_ms;
    if (++failed_runs < std::max(1, infra_attempts)) return true;
    for (size_t c : pending) {
      verdicts[c].outcome = pb::OUTCOME_INFRA_ERROR;
      verdicts[c].detail = failure;
      verdicts[c].attempts = failed_runs;
      verdicts[c].cpu_ms = unbilled_ms / double(pending.size());
    }
    return false;
  };
  // Judges candidate c alone, in a call of its own, adding `cpu_ms` to its CPU time.
  auto alone = [&](size_t c, double cpu_ms) {
    verdicts[c] = VerifyPythonFunctions({candidates[c]}, limits, infra_attempts)[0];
    verdicts[c].cpu_ms += cpu_ms;
  };
  while (!pending.empty()) {
    const std::string key = RunKey();
    SandboxRequest req;
    req.limits = limits;
    // The run's own limits hold all of its candidates (the harness gives each its own).
    const uint64_t per = uint64_t(pending.size());
    req.limits.wall_timeout_ms = uint32_t(
        std::min<uint64_t>(UINT32_MAX, per * (4 * uint64_t(limits.wall_timeout_ms) + 300) + 2000));
    req.limits.cpu_seconds =
        uint32_t(std::min<uint64_t>(UINT32_MAX, per * uint64_t(limits.cpu_seconds) + 2));
    req.limits.max_output_bytes = per * (limits.max_output_bytes + 2 * key.size() + 128) + 4096;
    req.limits.max_processes = limits.max_processes + 1;  // the harness
    req.as_pid1 = true;  // the harness: candidates' signals to it are dropped, kill(-1) spares it
    req.files.emplace_back("harness.py", kHarness);
    req.stdin_data = key;
    for (size_t c : pending) req.stdin_data += frames[c];
    req.argv = {"/usr/bin/python3",
                "-I",
                "-S",
                "harness.py",
                std::to_string(limits.wall_timeout_ms),
                std::to_string(std::max<uint32_t>(1, limits.cpu_seconds)),
                std::to_string(key.size())};
    auto r = RunSandboxed(req);
    const double cpu_ms = (r.ok() ? r->cpu_ms : 0) + unbilled_ms;
    if (!r.ok() || r->outcome == SandboxOutcome::kSetupFailed) {
      if (!retry(r.ok() ? "sandbox: " + r->setup_error : r.status().ToString(), cpu_ms)) break;
      continue;
    }
    const std::vector<CandidateReport> run = ParseRun(r->stdout_data, key, per);
    size_t started = 0;
    for (const CandidateReport& rep : run) started += rep.started;
    // The run's cgroup killed a process at its memory limit, which may have been a process a
    // candidate left, or one of a later candidate: each candidate that ran is run again alone.
    if (r->outcome == SandboxOutcome::kMemoryLimit && started > 1) {
      for (size_t k = 0; k < started; ++k) alone(pending[k], cpu_ms / double(started));
      pending.erase(pending.begin(), pending.begin() + long(started));
      unbilled_ms = 0;
      failed_runs = 0;
      continue;
    }
    const bool harness_broke = r->outcome == SandboxOutcome::kExited && r->exit_code != 0;
    std::vector<size_t> judged;
    for (size_t k = 0; k < pending.size(); ++k) {
      const CandidateReport& rep = run[k];
      const PythonCandidate& cand = candidates[pending[k]];
      // (+1: the newline before the end frame.)
      const bool over_output = rep.data.size() > limits.max_output_bytes + 1;
      if (rep.ended) {
        int signal = 0;
        const SandboxOutcome how = EndedAs(rep.end, *r, &signal);
        verdicts[pending[k]] =
            Judge(over_output ? SandboxOutcome::kOutputLimit : how, signal, "", rep.data, cand);
      } else if (rep.started && k == 0 && !harness_broke) {
        // The run ended while its first candidate ran: as in a run of its own, the run's end is
        // its end. (A later candidate goes first in the next run instead: what ended this one
        // may have been left by an earlier candidate.)
        verdicts[pending[k]] = Judge(over_output ? SandboxOutcome::kOutputLimit : r->outcome,
                                     r->signal, r->setup_error, rep.data, cand);
      } else {
        break;
      }
      judged.push_back(pending[k]);
    }
    if (judged.empty() && harness_broke && run[0].started && n > 1) {
      // The harness broke while the first candidate ran: that candidate is retried alone (and
      // only it can end up an infrastructure error); the rest go on.
      alone(pending[0], cpu_ms);
      pending.erase(pending.begin());
      unbilled_ms = 0;
      failed_runs = 0;
      continue;
    }
    if (judged.empty()) {
      if (!retry(harness_broke ? "the harness failed: " + r->stderr_data.substr(0, 200)
                               : "the run judged no candidate",
                 cpu_ms)) {
        break;
      }
      continue;
    }
    for (size_t c : judged) {
      verdicts[c].cpu_ms = cpu_ms / double(judged.size());
      verdicts[c].attempts = failed_runs + 1;
    }
    unbilled_ms = 0;
    failed_runs = 0;
    pending.erase(pending.begin(), pending.begin() + long(judged.size()));
  }
  return verdicts;
}

Verdict VerifyPythonFunction(const std::string& candidate, const PythonTestsSpec& spec) {
  PythonCandidate c{candidate, spec.function_name, spec.tests};
  return VerifyPythonFunctions({c}, spec.limits, spec.infra_attempts)[0];
}

}  // namespace marlaas::sandbox

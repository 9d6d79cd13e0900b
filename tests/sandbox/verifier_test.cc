// Verifiers: answer normalisation and the Python-tests verifier's outcomes.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "sandbox/answer_match.h"
#include "sandbox/python_tests_verifier.h"

namespace marlaas::sandbox {
namespace {

TEST(AnswerMatchTest, NormalisationFollowsTheDocumentedRules) {
  EXPECT_EQ(NormalizeAnswer("  42 "), "42");
  EXPECT_EQ(NormalizeAnswer("+7.50"), "7.5");
  EXPECT_EQ(NormalizeAnswer("7.0"), "7");
  EXPECT_EQ(NormalizeAnswer("-0.0"), "0");
  EXPECT_EQ(NormalizeAnswer("a   b\tc"), "a b c");
  EXPECT_TRUE(AnswersMatch("42", " +42.000"));
  EXPECT_TRUE(AnswersMatch("2", "6/3"));
  EXPECT_TRUE(AnswersMatch("0.5", "1/2"));
  EXPECT_FALSE(AnswersMatch("1000", "1,000"));
  EXPECT_FALSE(AnswersMatch("42", "43"));
  EXPECT_FALSE(AnswersMatch("1", "1/0"));
  EXPECT_FALSE(AnswersMatch("", ""));
  EXPECT_TRUE(AnswersMatch("Paris", " Paris "));
  EXPECT_EQ(ExtractFinalAnswer(" 71\nQ: next"), "71");
  EXPECT_EQ(ExtractFinalAnswer("so 3+4 is seven. A: 7\n"), "7");
}

PythonTestsSpec SquareSpec() {
  PythonTestsSpec s;
  s.function_name = "f";
  s.tests = {{"[3]", "9"}, {"[-2]", "4"}, {"[0]", "0"}};
  return s;
}

TEST(PythonTestsVerifierTest, CorrectWrongAndRaisingCandidates) {
  auto ok = VerifyPythonFunction("def f(x):\n    print('noise')\n    return x * x\n", SquareSpec());
  EXPECT_EQ(ok.outcome, pb::OUTCOME_OK) << ok.detail;
  EXPECT_EQ(ok.reward, 1.0);
  EXPECT_GT(ok.cpu_ms, 0.0);  // its sandbox run's CPU time
  auto wrong = VerifyPythonFunction("def f(x):\n    return x + x\n", SquareSpec());
  EXPECT_EQ(wrong.outcome, pb::OUTCOME_WRONG_ANSWER) << wrong.detail;
  EXPECT_EQ(wrong.reward, 0.0);
  auto raises = VerifyPythonFunction("def f(x):\n    raise ValueError()\n", SquareSpec());
  EXPECT_EQ(raises.outcome, pb::OUTCOME_RUNTIME_ERROR);
  EXPECT_NE(raises.detail.find("ValueError"), std::string::npos);
  auto syntax = VerifyPythonFunction("def f(x) return x\n", SquareSpec());
  EXPECT_EQ(syntax.outcome, pb::OUTCOME_RUNTIME_ERROR);
  EXPECT_NE(syntax.detail.find("SyntaxError"), std::string::npos);
}

// A candidate that raises never passes, also when the expected output is None.
TEST(PythonTestsVerifierTest, RaisingNeverPassesEvenWhenNoneIsExpected) {
  PythonTestsSpec s;
  s.function_name = "g";
  s.tests = {{"[]", "null"}};
  EXPECT_EQ(VerifyPythonFunction("def g():\n    return None\n", s).outcome, pb::OUTCOME_OK);
  EXPECT_EQ(VerifyPythonFunction("def g():\n    raise SystemExit(0)\n", s).outcome,
            pb::OUTCOME_RUNTIME_ERROR);
  EXPECT_EQ(VerifyPythonFunction("import os\ndef g():\n    os._exit(0)\n", s).outcome,
            pb::OUTCOME_RUNTIME_ERROR);
}

// Results travel as JSON written by the harness's own encoder: quotes, control characters,
// non-ASCII and non-BMP text, tuples, nested dicts, floats and booleans must survive it.
TEST(PythonTestsVerifierTest, ValuesOfEveryJsonShapeRoundTrip) {
  PythonTestsSpec s;
  s.function_name = "h";
  s.tests = {{R"(["x\"y\n", {"k": [1, null]}])",
              R"(["x\"y\n", "é🙂\\", [1, 2.5], {"k": [1, null], "n": true}, false])"}};
  const std::string candidate =
      "def h(s, d):\n"
      "    d = dict(d)\n    d['n'] = True\n"
      "    return [s, 'é🙂\\\\', (1, 2.5), d, False]\n";
  auto v = VerifyPythonFunction(candidate, s);
  EXPECT_EQ(v.outcome, pb::OUTCOME_OK) << v.detail;
  // Types are compared as JSON: True is not 1.
  s.tests = {{"[]", "1"}};
  EXPECT_EQ(VerifyPythonFunction("def h():\n    return True\n", s).outcome,
            pb::OUTCOME_WRONG_ANSWER);
}

TEST(PythonTestsVerifierTest, ResourceOutcomesAreDistinguished) {
  PythonTestsSpec s = SquareSpec();
  s.limits.wall_timeout_ms = 500;
  EXPECT_EQ(VerifyPythonFunction("def f(x):\n    while True: pass\n", s).outcome,
            pb::OUTCOME_TIMEOUT);
  EXPECT_EQ(VerifyPythonFunction("def f(x):\n    return bytearray(1 << 40)\n", s).outcome,
            pb::OUTCOME_MEMORY_LIMIT);
}

// Many candidates share one sandbox run, each in a process of its own: every verdict must be the
// one the candidate gets alone, whatever the candidates before it did to the sandbox, to the
// harness, or to themselves.
TEST(PythonTestsVerifierTest, CandidatesSharingARunAreJudgedAsIfAlone) {
  const std::string square = "def f(x):\n    return x * x\n";
  // Passes only in a sandbox as fresh as its own run: nothing in /work, no process but itself
  // in sight (the harness, PID 1, is not: hidepid), default priority and OOM score, and the run's
  // CPU limit.
  const std::string alone =
      "import os, resource, fcntl\n"
      "fresh = (os.listdir('/work') == [] and os.getpriority(os.PRIO_PROCESS, 0) == 0 and\n"
      "         fcntl.fcntl(1, fcntl.F_GETFL) & (os.O_NONBLOCK | os.O_ASYNC) == 0 and\n"
      "         fcntl.fcntl(1, fcntl.F_GETOWN) == 0 and fcntl.fcntl(1, 1032) > 4096 and\n"
      "         resource.getrlimit(resource.RLIMIT_CPU) == (2, 2) and\n"
      "         open('/proc/self/oom_score_adj').read() == '0\\n' and\n"
      "         [p for p in os.listdir('/proc') if p.isdigit()] == [str(os.getpid())])\n"
      "def f(x):\n    return x * x if fresh else -1\n";
  const struct {
    std::string source;
    pb::VerifierOutcome want;
  } cases[] = {
      {square, pb::OUTCOME_OK},
      {"def f(x):\n    return x + x\n", pb::OUTCOME_WRONG_ANSWER},
      {"def f(x):\n    raise ValueError()\n", pb::OUTCOME_RUNTIME_ERROR},
      {"def f(x) return x\n", pb::OUTCOME_RUNTIME_ERROR},
      // Leaves files and a process that keeps writing into /work.
      {"import os, time\nos.mkdir('d'); open('d/x', 'w').write('left'); os.chmod('d', 0)\n"
       "if os.fork() == 0:\n"
       "    while True:\n        open('/work/later', 'w').write('x'); time.sleep(0.001)\n" +
           square,
       pb::OUTCOME_OK},
      {alone, pb::OUTCOME_OK},
      // A tree deeper than Python's recursion limit, closed to its owner at every level.
      {"import os\np = '.'\ntry:\n    for i in range(1010):\n        p += '/d'; os.mkdir(p)\n"
       "except OSError: pass\nfor i in range(1010):\n    try: os.chmod(p, 0)\n"
       "    except OSError: pass\n    p = os.path.dirname(p)\n" +
           square,
       pb::OUTCOME_OK},
      {alone, pb::OUTCOME_OK},
      // Goes after the harness (PID 1) and what it passes on to the next candidate; passes only
      // if every attempt on the harness's priority, affinity, limits, memory and files was refused.
      {"import os, signal, resource\nrefused = 0\n"
       "for call in [lambda: os.setpriority(os.PRIO_PROCESS, 1, 19),\n"
       "             lambda: os.setpriority(os.PRIO_USER, 0, 19),\n"
       "             lambda: os.sched_setaffinity(1, {0}),\n"
       "             lambda: resource.prlimit(1, resource.RLIMIT_CPU, (0, 0)),\n"
       "             lambda: open('/proc/1/mem', 'r+b'), lambda: open('/proc/1/fd/1', 'w')]:\n"
       "    try: call()\n    except OSError: refused += 1\n"
       "os.kill(1, signal.SIGINT); os.kill(1, signal.SIGTERM); os.chmod('/work', 0)\n"
       "def f(x):\n    return x * x if refused == 6 else -1\n",
       pb::OUTCOME_OK},
      {alone, pb::OUTCOME_OK},
      // Makes the stdout it shares with the harness and the next candidates non-blocking (their
      // results failed to be written once the pipe was full: a right answer scored 0), asks
      // for SIGIO on it to go to the harness, and shrinks the pipe to a page (F_SETPIPE_SZ).
      {"import os, fcntl\n"
       "fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_NONBLOCK | os.O_ASYNC)\n"
       "fcntl.fcntl(1, fcntl.F_SETOWN, 1); fcntl.fcntl(1, 1031, 4096)\n" +
           square,
       pb::OUTCOME_OK},
      {alone, pb::OUTCOME_OK},
      // Makes PID 1 the OOM killer's first choice, which the next candidate would inherit.
      {"try: open('/proc/1/oom_score_adj', 'w').write('1000')\nexcept OSError: pass\n" + square,
       pb::OUTCOME_OK},
      {alone, pb::OUTCOME_OK},
      // Writes frames with a guessed key, the next candidate's end, lines nothing can parse and
      // a result nested 10000 deep (copying or printing it would recurse that deep), then
      // answers right.
      {"import os\nos.write(1, b'--1 {\\n' + b'9' * 5000 + b' {\\n' + b'0' * 32 + "
       "b' E 1 {\"exited\":0}\\n' + b'0' * 32 + b' R\\n0 {\"value\":' + b'[' * 10000 + "
       "b']' * 10000 + b'}\\n0 {\"error\":' + b'{\"a\":' * 5000 + b'1' + b'}' * 5001 + "
       "b'\\n')\n" +
           square,
       pb::OUTCOME_OK},
      {"import time\ndef f(x):\n    time.sleep(1)\n", pb::OUTCOME_TIMEOUT},
      // Writes right answers and then its own end, with the key the harness frames with (its
      // copy is zeroed: the frames are not the harness's), and hangs.
      {"import os, time, __main__\nk = bytes(__main__.key)\n"
       "os.write(1, b'0 {\"value\":9}\\n1 {\"value\":4}\\n2 {\"value\":0}\\n')\n"
       "for c in range(40): os.write(1, b'\\n' + k + b' E %d {\"exited\":0}\\n' % c)\n"
       "def f(x):\n    time.sleep(10)\n",
       pb::OUTCOME_TIMEOUT},
      // Pins itself to one CPU beside three spinning processes of its own: waiting for that CPU
      // is its own doing, and does not stretch its wall clock.
      {"import os, time\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
       "for i in range(3):\n    if os.fork() == 0:\n        while True: pass\n"
       "t = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n" +
           square,
       pb::OUTCOME_TIMEOUT},
      {alone, pb::OUTCOME_OK},
      {"while True: pass\n" + square, pb::OUTCOME_TIMEOUT},
      {"def f(x):\n    return 'x' * 1000000\n", pb::OUTCOME_OUTPUT_LIMIT},
      {"import os\ndef f(x):\n    os.kill(os.getpid(), 9)\n", pb::OUTCOME_TIMEOUT},  // as CPU
      {"def f(x):\n    return bytearray(1 << 40)\n", pb::OUTCOME_MEMORY_LIMIT},
      {"import ctypes\ndef f(x):\n    return ctypes.string_at(0)\n", pb::OUTCOME_RUNTIME_ERROR},
      {"import os\ndef f(x):\n    os._exit(0)\n", pb::OUTCOME_RUNTIME_ERROR},
      {alone, pb::OUTCOME_OK},
  };
  PythonTestsSpec spec = SquareSpec();
  spec.limits.wall_timeout_ms = 700;
  std::vector<PythonCandidate> group;
  for (const auto& c : cases) group.push_back({c.source, spec.function_name, spec.tests});
  const std::vector<Verdict> together = VerifyPythonFunctions(group, spec.limits);
  ASSERT_EQ(together.size(), group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    const Verdict alone_verdict = VerifyPythonFunction(cases[i].source, spec);
    EXPECT_EQ(alone_verdict.outcome, cases[i].want) << i << ": " << alone_verdict.detail;
    EXPECT_EQ(together[i].outcome, cases[i].want) << i << ": " << together[i].detail;
    EXPECT_EQ(together[i].detail, alone_verdict.detail) << i;
    EXPECT_EQ(together[i].attempts, 1) << i;
    EXPECT_GT(together[i].cpu_ms, 0.0) << i;
  }
}

// Nothing of a candidate (its source, its results) is left in the harness's memory, which the
// next candidate's process starts as a copy of: the second candidate searches its whole address
// space for markers the first one's source and results carry.
TEST(PythonTestsVerifierTest, ALaterCandidateFindsNothingOfAnEarlierOneInItsMemory) {
  const std::string first = "# MARKER_7f3a\ndef f(x):\n    return 'RESULT' + '_9c1e' + str(x)\n";
  const std::string search =
      "import re\nfound = []\n"
      "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb', 0) as mem:\n"
      "    for line in maps:\n"
      "        m = re.match(r'([0-9a-f]+)-([0-9a-f]+) r', line)\n"
      "        if not m or '[vvar' in line or '[vsyscall' in line: continue\n"
      "        a, b = int(m.group(1), 16), int(m.group(2), 16)\n"
      "        try: mem.seek(a); data = mem.read(b - a)\n"
      "        except (OSError, ValueError, OverflowError): continue\n"
      "        for head, tail in ((b'MARKER', b'_7f3a'), (b'RESULT', b'_9c1e')):\n"
      "            i = data.find(head)\n"
      "            while i >= 0:\n"
      "                if data[i + 6:i + 11] == tail: found.append(head)\n"
      "                i = data.find(head, i + 1)\n"
      "def f(x):\n    return sorted(set(found))\n";
  std::vector<PythonCandidate> group = {{first, "f", {{"[3]", "\"RESULT_9c1e3\""}}},
                                        {search, "f", {{"[3]", "[]"}}}};
  const std::vector<Verdict> v = VerifyPythonFunctions(group, SandboxLimits{});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].outcome, pb::OUTCOME_OK) << v[0].detail;
  EXPECT_EQ(v[1].outcome, pb::OUTCOME_OK) << v[1].detail;
  EXPECT_EQ(v[1].attempts, 1);
}

// Each candidate brings its own function and tests; none of a candidate's expected values is
// needed to judge another.
TEST(PythonTestsVerifierTest, EachCandidateHasItsOwnFunctionAndTests) {
  std::vector<PythonCandidate> group = {
      {"def f(x):\n    return x * x\n", "f", {{"[3]", "9"}}},
      {"def g(s):\n    return s.upper()\n", "g", {{"[\"ab\"]", "\"AB\""}, {"[\"\"]", "\"\""}}},
      {"def g(s):\n    return s\n", "g", {{"[\"ab\"]", "\"AB\""}}},
      {"def h():\n    return 1\n", "h", {{"[1", "1"}}},  // a broken hidden test
  };
  const std::vector<Verdict> v = VerifyPythonFunctions(group, SandboxLimits{});
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].outcome, pb::OUTCOME_OK) << v[0].detail;
  EXPECT_EQ(v[1].outcome, pb::OUTCOME_OK) << v[1].detail;
  EXPECT_EQ(v[2].outcome, pb::OUTCOME_WRONG_ANSWER) << v[2].detail;
  EXPECT_EQ(v[3].outcome, pb::OUTCOME_INFRA_ERROR);
  EXPECT_TRUE(VerifyPythonFunctions({}, SandboxLimits{}).empty());
}

// A candidate's wall-clock limit does not count the time it waited for a CPU. With three
// spinning threads on the one CPU the sandbox may use, a candidate needing ~300 ms of CPU gets
// half of it (its session's autogroup against the spinners'; a quarter without autogroups), so
// it cannot finish within its 400 ms limit unless its waiting is credited (which needs the
// harness to see it in /proc), and does within the 1.6 s the credit may reach;
// one that sleeps 600 ms still times out, and so does one whose waiting its own child caused.
TEST(PythonTestsVerifierTest, WaitingForACpuDoesNotCountAgainstTheWallClock) {
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof(before), &before), 0);
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &before)) ++cpu;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  // The sandbox's processes are forked from this thread and inherit its affinity.
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < 3; ++i) {
    spinners.emplace_back([&] {
      sched_setaffinity(0, sizeof(one), &one);
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  PythonTestsSpec spec = SquareSpec();
  spec.limits.wall_timeout_ms = 400;
  const std::vector<PythonCandidate> group = {
      {"import time\ndef f(x):\n    t = time.process_time()\n"
       "    while time.process_time() - t < 0.1: pass\n    return x * x\n",
       "f", spec.tests},
      {"import time\ndef f(x):\n    time.sleep(0.2)\n    return x * x\n", "f", spec.tests},
      // Makes its own contention: a child, hidden from /proc's listing (non-dumpable), spins.
      {"import ctypes, os, time\n"
       "if os.fork() == 0:\n"
       "    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
       "    while True: pass\n"
       "def f(x):\n    t = time.process_time()\n"
       "    while time.process_time() - t < 0.1: pass\n    return x * x\n",
       "f", spec.tests},
  };
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Verdict> v = VerifyPythonFunctions(group, spec.limits);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  for (std::thread& t : spinners) t.join();
  ASSERT_EQ(sched_setaffinity(0, sizeof(before), &before), 0);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].outcome, pb::OUTCOME_OK) << v[0].detail << " (the run took " << wall_s << " s)";
  EXPECT_EQ(v[1].outcome, pb::OUTCOME_TIMEOUT) << v[1].detail;
  // Without ns_last_pid only /proc's listing tells, and the hidden child goes unseen.
  if (::access("/proc/sys/kernel/ns_last_pid", R_OK) == 0) {
    EXPECT_EQ(v[2].outcome, pb::OUTCOME_TIMEOUT) << v[2].detail;
  } else {
    std::printf("no /proc/sys/kernel/ns_last_pid on this kernel: a hidden child goes unseen\n");
  }
}

TEST(PythonTestsVerifierTest, BrokenHiddenTestsAreAnInfrastructureErrorNotAReward) {
  PythonTestsSpec s = SquareSpec();
  s.tests.push_back({"[1", "1"});
  const Verdict v = VerifyPythonFunction("def f(x):\n    return x * x\n", s);
  EXPECT_EQ(v.outcome, pb::OUTCOME_INFRA_ERROR);
  EXPECT_FALSE(v.scored());
}

}  // namespace
}  // namespace marlaas::sandbox

#include "sandbox/command_verifier.h"

namespace marlaas::sandbox {
namespace {

CommandVerifierSpec PyVerifier(const std::string& script) {
  CommandVerifierSpec s;
  s.argv = {"/usr/bin/python3", "-I", "-S", "verify.py"};
  s.files = {{"verify.py", script}};
  s.limits.wall_timeout_ms = 1000;
  return s;
}

// The program gets the row's id, prompt, reference and metadata with the completion (a dataset
// written by `marlaas tasks` keeps its answer in "reference").
TEST(CommandVerifierTest, RewardComesFromTheTenantsProgram) {
  auto spec = PyVerifier(
      "import json, sys\nd = json.load(sys.stdin)\n"
      "ok = d['completion'].strip() == d['reference'] and d['metadata']['answer'] == 4\n"
      "ok = ok and d['id'] == 'r7' and d['prompt'] == '2+2?'\n"
      "print(json.dumps({'reward': 1.0 if ok else 0.25}))\n");
  auto right = RunCommandVerifier(spec, {"r7", "2+2?", " 4\n", "4", R"({"answer": 4})"});
  EXPECT_EQ(right.outcome, pb::OUTCOME_OK) << right.detail;
  EXPECT_EQ(right.reward, 1.0);
  EXPECT_GT(right.cpu_ms, 0.0);
  auto wrong = RunCommandVerifier(spec, {"r7", "2+2?", " 5", "4", R"({"answer": 4})"});
  EXPECT_EQ(wrong.outcome, pb::OUTCOME_OK);
  EXPECT_EQ(wrong.reward, 0.25);
  auto no_metadata = RunCommandVerifier(spec, {"r7", "2+2?", " 4", "4", ""});
  EXPECT_EQ(no_metadata.outcome, pb::OUTCOME_INFRA_ERROR);  // KeyError: metadata has no answer
}

// A verifier that breaks its contract is a verifier error, retried, and never a reward.
TEST(CommandVerifierTest, BrokenVerifiersAreErrorsNotRewards) {
  const char* broken[] = {
      "raise RuntimeError('boom')",
      "print('not json')",
      "print('{\"reward\": 1.5}')",
      "print('{\"score\": 1}')",
      "import time\ntime.sleep(5)",
      // Two rewards: the last one counted (0 here), though the first said 1.
      "print('{\"reward\": 1.0, \"reward\": 0.0}')",
  };
  for (const char* script : broken) {
    auto v = RunCommandVerifier(PyVerifier(script), {"i", "p", "c", "r", "{}"});
    EXPECT_EQ(v.outcome, pb::OUTCOME_INFRA_ERROR) << script;
    EXPECT_FALSE(v.scored());
    EXPECT_EQ(v.attempts, 2) << script;
    EXPECT_NE(v.detail.find("verifier error"), std::string::npos);
  }
  auto twice = RunCommandVerifier(PyVerifier("print('{\"reward\": 1, \"reward\": 0}')"),
                                  {"i", "p", "c", "r", "{}"});
  EXPECT_NE(twice.detail.find("names \"reward\" 2 times"), std::string::npos) << twice.detail;
}

}  // namespace
}  // namespace marlaas::sandbox

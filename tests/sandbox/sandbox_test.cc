// The sandbox against hostile programs: each test states the attack, asserts it failed, and
// that the host (this test process, its files, its network) is unharmed.
#include "sandbox/sandbox.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "sandbox/escape_suite.h"
#include "sandbox/probe.h"
#include "sandbox/seccomp_filter.h"
#include "tests/test_util.h"

namespace marlaas::sandbox {
namespace {

SandboxResult RunIn(std::vector<std::string> argv, SandboxLimits limits = {},
                    std::string stdin_data = "",
                    std::vector<std::pair<std::string, std::string>> files = {},
                    bool as_pid1 = false) {
  SandboxRequest r;
  r.argv = std::move(argv);
  r.limits = limits;
  r.stdin_data = std::move(stdin_data);
  r.files = std::move(files);
  r.as_pid1 = as_pid1;
  auto res = RunSandboxed(r);
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  return res.ok() ? *res : SandboxResult{};
}

SandboxResult Python(const std::string& code, SandboxLimits limits = {}) {
  return RunIn({"/usr/bin/python3", "-I", "-S", "-c", code}, limits);
}

TEST(SandboxTest, RunsAProgramWithStdinStdoutStderrAndExitCode) {
  auto r = RunIn({"/usr/bin/python3", "-I", "-S", "-c",
                  "import sys; print(input() * 2); print('oops', file=sys.stderr); sys.exit(3)"},
                 {}, "ab\n");
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error << r.stderr_data;
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.stdout_data, "abab\n");
  EXPECT_EQ(r.stderr_data, "oops\n");
}

// The program is not its pid namespace's PID 1 (which drops every signal it sends itself without
// a handler): signals it sends itself end it as on any host. With as_pid1 it is PID 1, and they
// do not.
TEST(SandboxTest, SignalsTheProgramSendsItselfEndIt) {
  auto segv = RunIn({"/bin/sh", "-c", "kill -SEGV $$; echo survived"});
  EXPECT_EQ(segv.outcome, SandboxOutcome::kSignaled) << segv.setup_error << segv.stdout_data;
  EXPECT_EQ(segv.signal, SIGSEGV);
  EXPECT_EQ(segv.stdout_data, "");
  auto killed = Python("import os\nos.kill(os.getpid(), 9)\nprint('survived')");
  EXPECT_EQ(killed.outcome, SandboxOutcome::kSignaled) << killed.setup_error << killed.stdout_data;
  EXPECT_EQ(killed.signal, SIGKILL);
  auto aborted = Python("import os\nos.abort()");
  EXPECT_EQ(aborted.outcome, SandboxOutcome::kSignaled) << aborted.setup_error;
  EXPECT_EQ(aborted.signal, SIGABRT);
  auto pid1 = RunIn({"/bin/sh", "-c", "kill -TERM $$; echo survived $$"}, {}, "", {}, true);
  EXPECT_EQ(pid1.outcome, SandboxOutcome::kExited) << pid1.setup_error;
  EXPECT_EQ(pid1.stdout_data, "survived 1\n");
}

// The init is a fork of this process: a handler of ours must not run in it at the program's
// kill(1, ...) (here one that would end the init, and with it the run), nor may a signal this
// thread blocks stay blocked in the program.
TEST(SandboxTest, TheInitRunsNoHandlerOfTheHostAndTheProgramStartsUnblocked) {
  struct sigaction ends {
  }, old{};
  ends.sa_handler = [](int) { ::_exit(42); };
  ASSERT_EQ(::sigaction(SIGUSR1, &ends, &old), 0);
  sigset_t usr2, old_mask;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &usr2, &old_mask), 0);
  auto r = RunIn(
      {"/bin/sh", "-c", "kill -USR1 1; sleep 0.2; echo init alive; grep SigBlk /proc/self/status"});
  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::sigaction(SIGUSR1, &old, nullptr);
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error << r.stdout_data;
  EXPECT_EQ(r.stdout_data, "init alive\nSigBlk:\t0000000000000000\n");
}

// A process whose parent exited is reparented to the namespace's init, which reaps it when it
// ends: no zombie is left (each would count against the run's pids limit). A program that is
// PID 1 (as_pid1) is that init and has to reap its orphans itself; this one does not.
TEST(SandboxTest, OrphansAreReapedUnlessTheProgramIsPid1) {
  // The grandchild outlives its parent, ends, and is watched for 2 s: gone (reaped) or a zombie.
  const std::string code =
      "import os, time\n"
      "r, w = os.pipe()\n"
      "child = os.fork()\n"
      "if child == 0:\n"
      "    pid = os.fork()\n"
      "    if pid == 0:\n        time.sleep(0.05); os._exit(0)\n"
      "    os.write(w, str(pid).encode()); os._exit(0)\n"
      "os.waitpid(child, 0)\n"
      "orphan = int(os.read(r, 32))\n"
      "state, give_up = 'running', time.time() + 2\n"
      "while time.time() < give_up:\n"
      "    try: s = open('/proc/%d/stat' % orphan).read().rsplit(')', 1)[1].split()[0]\n"
      "    except OSError: state = 'reaped'; break\n"
      "    if s == 'Z': state = 'zombie'\n"
      "    time.sleep(0.01)\n"
      "print('pid', os.getpid(), state)\n";
  SandboxLimits l;
  l.wall_timeout_ms = 8000;
  auto reaped = RunIn({"/usr/bin/python3", "-I", "-S", "-c", code}, l);
  ASSERT_EQ(reaped.outcome, SandboxOutcome::kExited) << reaped.stderr_data << reaped.setup_error;
  EXPECT_EQ(reaped.stdout_data, "pid 2 reaped\n");
  auto left = RunIn({"/usr/bin/python3", "-I", "-S", "-c", code}, l, "", {}, true);
  ASSERT_EQ(left.outcome, SandboxOutcome::kExited) << left.stderr_data << left.setup_error;
  EXPECT_EQ(left.stdout_data, "pid 1 zombie\n");
}

// Far more stdin than a pipe holds, to a program that exits without reading it: the caller must
// not die of SIGPIPE (this test process would).
TEST(SandboxTest, UnreadStdinDoesNotHurtTheCaller) {
  auto r = RunIn({"/bin/true"}, {}, std::string(4 << 20, 'x'));
  EXPECT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error;
  EXPECT_EQ(r.exit_code, 0);
}

// The run's time ends while its request (a large file) is still being sent: without cgroups to
// sweep up, the program must still die with its helper.
TEST(SandboxTest, ARunTimedOutBeforeItStartedLeavesNothingRunning) {
  SandboxLimits l;
  l.cgroup_limits = false;
  l.wall_timeout_ms = 1;
  l.work_dir_bytes = 64ull << 20;
  l.max_file_bytes = 64ull << 20;
  for (int i = 0; i < 5; ++i) {
    auto r = RunIn({"/bin/sh", "-c", "sleep 4251"}, l, "", {{"big", std::string(16 << 20, 'y')}});
    EXPECT_EQ(r.outcome, SandboxOutcome::kTimeout) << SandboxOutcomeName(r.outcome);
  }
  for (int i = 0; i < 100 && CountHostProcesses("sleep 4251") > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(CountHostProcesses("sleep 4251"), 0) << "a timed-out program kept running";
}

TEST(SandboxTest, FilesArePlacedInTheWorkDir) {
  auto r = RunIn({"/bin/sh", "-c", "pwd; cat input.txt"}, {}, "", {{"input.txt", "hello"}});
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error;
  EXPECT_EQ(r.stdout_data, "/work\nhello");
}

// Files that do not fit the work dir are refused up front with both sizes, not failed in the
// sandbox's set-up ("write work file: Bad address" for a 20 MB program); a file that fits runs.
TEST(SandboxTest, FilesLargerThanTheWorkDirAreRefusedWithTheSizes) {
  SandboxRequest r;
  r.argv = {"/bin/sh", "-c", "wc -c < big"};
  r.limits.work_dir_bytes = 64 << 10;
  r.files = {{"big", std::string(100 << 10, 'x')}};
  auto res = RunSandboxed(r);
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(res.status().message().find("files are 102400 bytes, more than its work dir holds "
                                        "(65536 bytes)"),
            std::string::npos)
      << res.status().message();
  r.files = {{"big", std::string(32 << 10, 'x')}};
  res = RunSandboxed(r);
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->stdout_data, "32768\n") << res->setup_error;
}

// A host process that ignores SIGPIPE (serve does) does not pass that on: in the sandbox,
// `yes | head -1` ends quietly, `yes` killed by SIGPIPE, not told "Broken pipe".
TEST(SandboxTest, TheProgramGetsTheDefaultSigpipeWhateverTheHostDoes) {
  struct sigaction ignore {
  }, before{}, before_hup{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &before), 0);
  ASSERT_EQ(::sigaction(SIGHUP, &ignore, &before_hup), 0);  // serve ignores hangups
  testing::ScopeExit restore([&] {
    ::sigaction(SIGPIPE, &before, nullptr);
    ::sigaction(SIGHUP, &before_hup, nullptr);
  });
  auto r = RunIn({"/bin/sh", "-c", "yes | head -1"});
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error;
  EXPECT_EQ(r.stdout_data, "y\n");
  EXPECT_EQ(r.stderr_data, "");
  // A process of the program (not its first, which is the namespace's init) dies of a SIGHUP.
  r = RunIn({"/bin/sh", "-c", "sh -c 'kill -HUP $$; echo survived'; echo rc=$?"});
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error;
  EXPECT_EQ(r.stdout_data, "rc=129\n");
}

TEST(SandboxTest, OutputIsCappedAndReported) {
  SandboxLimits l;
  l.max_output_bytes = 10000;
  auto r = Python("while True: print('x' * 1000)", l);
  EXPECT_EQ(r.outcome, SandboxOutcome::kOutputLimit);
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_EQ(r.stdout_data.size(), 10000u);
}

// cpu_ms is what the run cost the machine: every process of it, also one its parent never
// waited for (reaped when the pid namespace ends), and not the time it spent waiting.
TEST(SandboxTest, CpuTimeCountsEveryProcessOfTheRunAndNotItsWaiting) {
  SandboxLimits l;
  l.wall_timeout_ms = 20000;  // ctest runs tests in parallel: the burn may wait for a core
  l.cpu_seconds = 10;
  // The child burns 0.3 s of its own CPU time and tells the parent, which exits without waiting
  // for it and having used almost none itself.
  auto burn = Python(
      "import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n"
      "    while time.process_time() < 0.3: pass\n    os.write(w, b'x')\n    os._exit(0)\n"
      "os.read(r, 1)\nprint(round(time.process_time(), 3))",
      l);
  ASSERT_EQ(burn.outcome, SandboxOutcome::kExited) << burn.setup_error << burn.stderr_data;
  EXPECT_LT(std::stod(burn.stdout_data), 0.2) << "the parent itself burned";
  EXPECT_GE(burn.cpu_ms, 300.0);
  // Counted once: one process burned at a time (the set-up of a sandbox prepared ahead of the
  // call may precede wall_ms by a few ms).
  EXPECT_LE(burn.cpu_ms, burn.wall_ms + 50.0);
  auto sleeper = Python("import time; time.sleep(0.5)", l);
  ASSERT_EQ(sleeper.outcome, SandboxOutcome::kExited) << sleeper.setup_error;
  EXPECT_GE(sleeper.wall_ms, 500.0);
  EXPECT_GT(sleeper.cpu_ms, 0.0);  // the interpreter's start and the sandbox's set-up
  EXPECT_LT(sleeper.cpu_ms, 250.0);
}

TEST(SandboxTest, NothingLeaksFromOneRunIntoTheNext) {
  auto first = RunIn({"/bin/sh", "-c", "echo secret > /work/left; echo secret > /tmp/left2"});
  ASSERT_EQ(first.outcome, SandboxOutcome::kExited) << first.setup_error;
  auto second = RunIn({"/bin/sh", "-c", "ls /work /tmp"});
  ASSERT_EQ(second.outcome, SandboxOutcome::kExited);
  EXPECT_EQ(second.stdout_data, "/tmp:\n\n/work:\n");
}

// A run cannot see the service's state dir, the host's sandbox roots, or another run that is
// going on at the same time (its files, its processes).
TEST(SandboxTest, RunsCannotSeeTheStateDirOrEachOther) {
  char state_tmpl[] = "/tmp/marlaas-state-test-XXXXXX";
  ASSERT_NE(mkdtemp(state_tmpl), nullptr);
  const std::string state = state_tmpl;
  { std::ofstream(state + "/tenant-secret") << "adapter bytes"; }
  SandboxLimits slow;
  slow.wall_timeout_ms = 4000;
  std::thread other([&] {
    auto a = RunIn({"/bin/sh", "-c", "echo other-run-secret > /work/secret_a; sleep 1.5"}, slow);
    EXPECT_EQ(a.outcome, SandboxOutcome::kExited) << a.setup_error;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // run A is under way
  const std::string code =
      "import os, glob\n"
      "seen = []\n"
      "for p in ['" +
      state + "', '" + state +
      "/tenant-secret', '/tmp/marlaas-state-test']:\n"
      "    seen += [p] if os.path.exists(p) else []\n"
      "seen += glob.glob('/tmp/marlaas-*') + glob.glob('/*/secret_a') + glob.glob('/*/*/secret_a') "
      "+ os.listdir('/')\n"
      "for pid in [d for d in os.listdir('/proc') if d.isdigit()]:\n"
      "    seen += ['proc ' + pid]\n"
      "    if pid != str(os.getpid()): seen += [open('/proc/%s/cmdline' % pid).read()]\n"
      "print(seen, os.getpid())\n";
  auto b = Python(code);
  other.join();
  ASSERT_EQ(b.outcome, SandboxOutcome::kExited) << b.stderr_data << b.setup_error;
  // Only the program itself (pid 2 of its own namespace) is visible: not the other run's
  // processes, nor its own init (PID 1, a fork of this test process).
  EXPECT_EQ(b.stdout_data.find("secret"), std::string::npos) << b.stdout_data;
  EXPECT_EQ(b.stdout_data.find("marlaas-"), std::string::npos) << b.stdout_data;
  EXPECT_EQ(b.stdout_data.find("sleep"), std::string::npos) << b.stdout_data;
  EXPECT_NE(b.stdout_data.find("'proc 2'"), std::string::npos) << b.stdout_data;
  EXPECT_EQ(b.stdout_data.find("'proc "), b.stdout_data.rfind("'proc ")) << b.stdout_data;
  EXPECT_NE(b.stdout_data.find("] 2\n"), std::string::npos) << b.stdout_data;
  std::remove((state + "/tenant-secret").c_str());
  rmdir(state.c_str());
}

// The per-process rlimits hold: open files stop at max_open_files (EMFILE), processes of the
// run's user at max_processes (EAGAIN).
TEST(SandboxTest, OpenFileAndProcessLimitsHold) {
  SandboxLimits l;
  l.max_open_files = 20;
  l.max_processes = 5;
  l.wall_timeout_ms = 5000;
  auto r = Python(
      "import os, time\nn = 0\ntry:\n    while n < 1000: os.open('/dev/null', os.O_RDONLY); n += "
      "1\nexcept OSError as e: print('files', n + 3, e.errno)\nkids = 0\ntry:\n"
      "    while kids < 100:\n        if os.fork() == 0: time.sleep(2); os._exit(0)\n"
      "        kids += 1\nexcept OSError as e: print('processes', kids + 1, e.errno)\n",
      l);
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.stderr_data << r.setup_error;
  int files = 0, files_errno = 0, procs = 0, procs_errno = 0;
  ASSERT_EQ(std::sscanf(r.stdout_data.c_str(), "files %d %d\nprocesses %d %d", &files, &files_errno,
                        &procs, &procs_errno),
            4)
      << r.stdout_data;
  EXPECT_EQ(files, 20);
  EXPECT_EQ(files_errno, EMFILE);
  // The sandbox's helper process runs as the same user and counts too.
  EXPECT_GE(procs, 3);
  EXPECT_LE(procs, 5);
  EXPECT_EQ(procs_errno, EAGAIN);
}

// A service run under a hard limit lower than a job asks for (`prlimit`, a container): runs get
// the service's limit, the stricter one, and still run (every run failed with "setrlimit:
// Operation not permitted").
TEST(SandboxTest, LimitsAboveTheServicesOwnHardLimitsAreLoweredToThem) {
  const pid_t child = testing::ForkChild([]() -> int {
    const struct rlimit low { 48, 48 };
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) return 1;
    SandboxLimits l;
    l.max_open_files = 200;
    auto r = Python("import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))\n", l);
    if (r.outcome != SandboxOutcome::kExited || r.exit_code != 0) {
      std::fprintf(stderr, "%s%s\n", r.stderr_data.c_str(), r.setup_error.c_str());
      return 2;
    }
    if (r.stdout_data != "(48, 48)\n") {
      std::fprintf(stderr, "limits: %s\n", r.stdout_data.c_str());
      return 3;
    }
    return 0;
  });
  const auto e = testing::WaitChildFor(child, 60);
  EXPECT_TRUE(e.exited && e.code == 0) << "exit " << e.code << " signal " << e.signal;
}

// Services listening on the host — TCP on loopback and an abstract Unix socket (the kind AF_UNIX
// sockets, which the filter allows, could reach) — cannot be reached from a run: AF_INET is
// refused and the abstract namespace belongs to the run's own network namespace.
TEST(SandboxTest, HostLoopbackAndAbstractSocketServicesAreUnreachable) {
  const int tcp = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(tcp, 0);
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(tcp, reinterpret_cast<sockaddr*>(&in), sizeof(in)), 0);
  socklen_t len = sizeof(in);
  ASSERT_EQ(::getsockname(tcp, reinterpret_cast<sockaddr*>(&in), &len), 0);
  ASSERT_EQ(::listen(tcp, 4), 0);
  const std::string abstract = "marlaas-test-" + std::to_string(::getpid());
  const int unix_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::memcpy(un.sun_path + 1, abstract.data(), abstract.size());
  const socklen_t un_len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + abstract.size());
  ASSERT_EQ(::bind(unix_fd, reinterpret_cast<sockaddr*>(&un), un_len), 0);
  ASSERT_EQ(::listen(unix_fd, 4), 0);
  const std::string code =
      "import socket\n"
      "try:\n    socket.create_connection(('127.0.0.1', " +
      std::to_string(ntohs(in.sin_port)) +
      "), timeout=1); print('tcp connected')\n"
      "except OSError as e: print('tcp', e.errno)\n"
      "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
      "try:\n    s.connect('\\0" +
      abstract +
      "'); print('unix connected')\n"
      "except OSError as e: print('unix', e.errno)\n";
  auto r = Python(code);
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.stderr_data << r.setup_error;
  EXPECT_EQ(r.stdout_data, "tcp 1\nunix 111\n");  // EPERM from seccomp; ECONNREFUSED: no one
  EXPECT_LT(::accept(tcp, nullptr, nullptr), 0);  // nothing ever arrived on the host side
  EXPECT_LT(::accept(unix_fd, nullptr, nullptr), 0);
  ::close(tcp);
  ::close(unix_fd);
}

// Every attack of the escape suite (the same cases `marlaas sandbox-check` runs) fails, and the
// host is unharmed; each case is its own test.
class EscapeSuiteTest : public ::testing::TestWithParam<EscapeCase> {};

TEST_P(EscapeSuiteTest, AttackIsContained) {
  const EscapeReport rep = RunEscapeCase(GetParam());
  EXPECT_TRUE(rep.contained) << rep.name << ": " << rep.detail;
}

INSTANTIATE_TEST_SUITE_P(Attacks, EscapeSuiteTest, ::testing::ValuesIn(EscapeSuite()),
                         [](const ::testing::TestParamInfo<EscapeCase>& info) {
                           return info.param.name;
                         });

TEST(SandboxProbeTest, ThisHostProvidesEveryRequiredLayer) {
  const auto layers = ProbeIsolation();
  ASSERT_GE(layers.size(), 7u);
  for (const auto& l : layers) {
    if (l.required) {
      EXPECT_TRUE(l.available) << l.name << ": " << l.detail;
    }
  }
  EXPECT_TRUE(StrongIsolation(layers));
}

// A host missing a required layer: untrusted work is refused with the layer named, unless the
// operator allowed a weak sandbox, which is then said loudly; an optional layer changes nothing.
TEST(SandboxProbeTest, AMissingRequiredLayerRefusesUntrustedWorkUnlessAllowed) {
  std::vector<IsolationLayer> layers = {{"user namespace", true, true, ""},
                                        {"seccomp-bpf", true, true, ""},
                                        {"cgroup limits per run (pids, memory)", false, false, ""}};
  IsolationPolicy p = DecideIsolationPolicy(layers, false);
  EXPECT_TRUE(p.refuse.empty() && p.warning.empty()) << p.refuse << p.warning;
  layers[1].available = false;
  p = DecideIsolationPolicy(layers, false);
  EXPECT_NE(p.refuse.find("seccomp-bpf"), std::string::npos) << p.refuse;
  EXPECT_NE(p.refuse.find("--allow-weak-sandbox"), std::string::npos) << p.refuse;
  EXPECT_EQ(p.refuse.find("cgroup"), std::string::npos) << p.refuse;
  EXPECT_TRUE(p.warning.empty());
  p = DecideIsolationPolicy(layers, true);
  EXPECT_TRUE(p.refuse.empty()) << p.refuse;
  EXPECT_NE(p.warning.find("WARNING"), std::string::npos) << p.warning;
  EXPECT_NE(p.warning.find("seccomp-bpf"), std::string::npos) << p.warning;
}

// What candidates sharing a run rely on (sandbox/python_tests_verifier.h), on top of what the
// escape suite attacks: the every_denied_syscall case checks only that the list is enforced.
TEST(SandboxTest, TheDenyListHoldsWhatSeparatesCandidatesOfOneRun) {
  const std::vector<std::string>& denied = DeniedSyscallNames();
  for (const char* name : {"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
                           "shmget", "semget", "msgget", "mq_open", "migrate_pages", "move_pages",
                           "unshare", "setns", "mount", "mount_setattr"}) {
    EXPECT_NE(std::find(denied.begin(), denied.end(), name), denied.end()) << name;
  }
}

// What no one weighed for the deny list is not reachable: the native numbers past the newest the
// library can name (open_tree_attr, listmount and statmount were allowed on a 6.x kernel) run
// to the end of the native range; the escape suite checks the filter answers them ENOSYS.
TEST(SandboxTest, SyscallsNewerThanTheFilterAreCovered) {
  const std::vector<int> newer = NewerSyscallNumbers();
#if defined(__x86_64__)
  ASSERT_FALSE(newer.empty());
  EXPECT_EQ(newer.back(), 511);
  for (size_t i = 0; i < newer.size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(newer[i], newer[i - 1] + 1);
    }
    char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, newer[i]);
    EXPECT_EQ(name, nullptr) << newer[i] << " is " << name;
    std::free(name);
  }
  // The one before the first is one the library knows: nothing between is left out.
  char* last_known = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, newer.front() - 1);
  EXPECT_NE(last_known, nullptr);
  std::free(last_known);
#else
  EXPECT_TRUE(newer.empty());
#endif
}

TEST(SandboxTest, BadRequestsAreRefused) {
  SandboxRequest r;
  r.argv = {"python3"};
  EXPECT_EQ(RunSandboxed(r).status().code(), StatusCode::kInvalidArgument);
  auto missing = RunIn({"/usr/bin/no-such-program"});
  EXPECT_EQ(missing.outcome, SandboxOutcome::kSetupFailed);
  EXPECT_NE(missing.setup_error.find("execve"), std::string::npos);
}

}  // namespace
}  // namespace marlaas::sandbox

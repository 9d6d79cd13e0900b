// The sandbox against hostile programs: each test states the attack, asserts it failed, and
// that the host (this test process, its files, its network) is unharmed.
#include "sandbox/sandbox.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace marlaas::sandbox {
namespace {

SandboxResult RunIn(std::vector<std::string> argv, SandboxLimits limits = {},
                    std::string stdin_data = "",
                    std::vector<std::pair<std::string, std::string>> files = {}) {
  SandboxRequest r;
  r.argv = std::move(argv);
  r.limits = limits;
  r.stdin_data = std::move(stdin_data);
  r.files = std::move(files);
  auto res = RunSandboxed(r);
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  return res.ok() ? *res : SandboxResult{};
}

SandboxResult Python(const std::string& code, SandboxLimits limits = {}) {
  return RunIn({"/usr/bin/python3", "-I", "-S", "-c", code}, limits);
}

// Processes whose command line contains `needle` (to see that nothing outlived a run).
int CountProcesses(const std::string& needle) {
  int n = 0;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    n += cmd.find(needle) != std::string::npos;
  }
  closedir(d);
  return n;
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

TEST(SandboxTest, FilesArePlacedInTheWorkDir) {
  auto r = RunIn({"/bin/sh", "-c", "pwd; cat input.txt"}, {}, "", {{"input.txt", "hello"}});
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error;
  EXPECT_EQ(r.stdout_data, "/work\nhello");
}

// Attack: sleep past the wall limit with background, setsid and double-forked children.
TEST(SandboxTest, WallTimeoutKillsTheWholeProcessTree) {
  SandboxLimits l;
  l.wall_timeout_ms = 300;
  auto r =
      RunIn({"/bin/sh", "-c", "sleep 4242 & setsid sleep 4243 & (sleep 4244 &) ; sleep 4245"}, l);
  EXPECT_EQ(r.outcome, SandboxOutcome::kTimeout);
  EXPECT_LT(r.wall_ms, 2000);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const char* s : {"sleep 4242", "sleep 4243", "sleep 4244", "sleep 4245"}) {
    EXPECT_EQ(CountProcesses(s), 0) << s << " outlived the sandbox";
  }
}

// Attack: a program that exits at once but leaves a background child behind.
TEST(SandboxTest, ChildrenDoNotOutliveTheProgram) {
  auto r = RunIn({"/bin/sh", "-c", "(sleep 4246 &); exit 0"});
  EXPECT_EQ(r.outcome, SandboxOutcome::kExited);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(CountProcesses("sleep 4246"), 0);
}

// Attack: endless output.
TEST(SandboxTest, OutputIsCappedAndReported) {
  SandboxLimits l;
  l.max_output_bytes = 10000;
  auto r = Python("while True: print('x' * 1000)", l);
  EXPECT_EQ(r.outcome, SandboxOutcome::kOutputLimit);
  EXPECT_TRUE(r.stdout_truncated);
  EXPECT_EQ(r.stdout_data.size(), 10000u);
}

// Attack: CPU spin.
TEST(SandboxTest, CpuSpinIsStopped) {
  SandboxLimits l;
  l.cpu_seconds = 1;
  l.wall_timeout_ms = 5000;
  auto r = Python("while True: pass", l);
  EXPECT_EQ(r.outcome, SandboxOutcome::kSignaled);
  EXPECT_TRUE(r.signal == SIGXCPU || r.signal == SIGKILL) << r.signal;
  EXPECT_LT(r.wall_ms, 4000);
}

// Attack: memory bomb.
TEST(SandboxTest, MemoryBombFailsInsideTheSandbox) {
  auto r = Python("x = bytearray(2 * 1024**3)");
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.stderr_data.find("MemoryError"), std::string::npos) << r.stderr_data;
}

// Attack: fork bomb. It must end (process limit, then the wall clock) and leave nothing behind.
TEST(SandboxTest, ForkBombIsContained) {
  SandboxLimits l;
  l.wall_timeout_ms = 1500;
  auto r = RunIn({"/bin/sh", "-c", "b() { b | b & }; b; sleep 4247"}, l);
  EXPECT_NE(r.outcome, SandboxOutcome::kSetupFailed) << r.setup_error;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(CountProcesses("sleep 4247"), 0);
}

// Attack: outbound TCP, UDP and DNS.
TEST(SandboxTest, NetworkSocketsAreRefused) {
  auto r = Python(
      "import socket\n"
      "for fam, kind in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, socket.SOCK_DGRAM),"
      " (socket.AF_INET6, socket.SOCK_STREAM)]:\n"
      "    try:\n        socket.socket(fam, kind); print('open')\n"
      "    except OSError as e: print('refused', e.errno)\n"
      "s = socket.socket(socket.AF_UNIX); print('unix ok')\n");
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "refused 1\nrefused 1\nrefused 1\nunix ok\n");
}

// Attack: read host secrets, write outside the work dir.
TEST(SandboxTest, HostFilesAreInvisibleAndTheRootIsReadOnly) {
  auto r = Python(
      "import os\n"
      "for p in ['/etc/shadow', '/root', '/proc/1/environ', '/dev/shm', '/home', '/tmp/..']:\n"
      "    print(p, os.path.exists(p))\n"
      "print(sorted(os.listdir('/')))\n"
      "for p in ['/usr/evil', '/evil', '/bin/evil']:\n"
      "    try:\n        open(p, 'w'); print('wrote', p)\n"
      "    except OSError as e: print('denied', p)\n"
      "open('/work/ok', 'w').write('fine'); print('work ok')\n");
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error << r.stderr_data;
  EXPECT_NE(r.stdout_data.find("/etc/shadow False"), std::string::npos) << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("/root False"), std::string::npos);
  EXPECT_NE(r.stdout_data.find("/dev/shm False"), std::string::npos);
  EXPECT_NE(
      r.stdout_data.find("['bin', 'dev', 'lib', 'lib64', 'proc', 'sbin', 'tmp', 'usr', 'work']"),
      std::string::npos)
      << r.stdout_data;
  EXPECT_NE(r.stdout_data.find("denied /usr/evil\ndenied /evil\ndenied /bin/evil\nwork ok"),
            std::string::npos)
      << r.stdout_data;
}

// Attack: namespace and mount changes, ptrace.
TEST(SandboxTest, PrivilegedSyscallsAreDenied) {
  auto r = Python(
      "import ctypes, os\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"
      "print('mount', libc.mount(b'none', b'/work', b'tmpfs', 0, None), ctypes.get_errno())\n"
      "print('ptrace', libc.ptrace(16, 1, None, None), ctypes.get_errno())\n");
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "unshare -1 1\nmount -1 1\nptrace -1 1\n");
}

// Attack: kill(-1). It reaches the sandbox's own processes only (here a child it started); the
// program itself is PID 1 of its namespace and this test process is out of its sight.
TEST(SandboxTest, KillAllOnlyReachesTheSandbox) {
  auto r = Python(
      "import os, signal, subprocess\n"
      "p = subprocess.Popen(['/usr/bin/sleep', '30'])\n"
      "print(os.getpid())\n"
      "os.kill(-1, signal.SIGKILL)\n"
      "print('child', p.wait())\n");
  ASSERT_EQ(r.outcome, SandboxOutcome::kExited) << r.setup_error << r.stderr_data;
  EXPECT_EQ(r.stdout_data, "1\nchild -9\n");
}

// Attack: leave state behind for the next run.
TEST(SandboxTest, NothingLeaksFromOneRunIntoTheNext) {
  auto first = RunIn({"/bin/sh", "-c", "echo secret > /work/left; echo secret > /tmp/left2"});
  ASSERT_EQ(first.outcome, SandboxOutcome::kExited) << first.setup_error;
  auto second = RunIn({"/bin/sh", "-c", "ls /work /tmp"});
  ASSERT_EQ(second.outcome, SandboxOutcome::kExited);
  EXPECT_EQ(second.stdout_data, "/tmp:\n\n/work:\n");
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

// Per-run cgroups: limits written, leftovers killed and the directories removed, and the memory
// limit bounding a run as a whole (where rlimits bound each process only). Skips, saying so, on
// hosts that do not let this process create cgroups.
#include "sandbox/run_cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "sandbox/sandbox.h"
#include "tests/test_util.h"

namespace marlaas::sandbox {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool DirExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

#define SKIP_WITHOUT_CGROUPS()                                           \
  do {                                                                   \
    if (!HostCgroupSupport().pids && !HostCgroupSupport().memory) {      \
      GTEST_SKIP() << "this host does not let the test create cgroups: " \
                   << HostCgroupSupport().detail;                        \
    }                                                                    \
  } while (0)

// An emptied run cgroup: still there for reuse, and nobody inside.
bool EmptyOrGone(const std::string& dir) {
  return !DirExists(dir) || Read(dir + "/cgroup.procs").empty();
}

std::string LimitsIn(const std::vector<std::string>& dirs) {
  std::string limits;
  for (const std::string& d : dirs)
    for (const char* f : {"/pids.max", "/memory.max", "/memory.limit_in_bytes"})
      if (DirExists(d + f)) limits += Read(d + f);
  return limits;
}

TEST(RunCgroupTest, LimitsAreWrittenAndRewrittenWhenTheDirsAreReused) {
  SKIP_WITHOUT_CGROUPS();
  std::vector<std::string> first;
  {
    auto cg = RunCgroup::Create(7, 48ull << 20);
    ASSERT_TRUE(cg.ok()) << cg.status().ToString();
    first = cg->dirs();
    ASSERT_FALSE(first.empty());
    for (const std::string& d : first) ASSERT_TRUE(DirExists(d)) << d;
    const std::string limits = LimitsIn(first);
    if (HostCgroupSupport().pids) {
      EXPECT_NE(limits.find("7\n"), std::string::npos) << limits;
    }
    if (HostCgroupSupport().memory) {
      EXPECT_NE(limits.find(std::to_string(48ull << 20)), std::string::npos) << limits;
    }
    EXPECT_FALSE(cg->OomKilled());
  }
  for (const std::string& d : first) EXPECT_TRUE(EmptyOrGone(d)) << d;
  // The next run of this process takes the emptied dirs, with its own limits.
  auto again = RunCgroup::Create(9, 80ull << 20);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->dirs(), first);
  const std::string limits = LimitsIn(again->dirs());
  if (HostCgroupSupport().pids) {
    EXPECT_NE(limits.find("9\n"), std::string::npos) << limits;
  }
  if (HostCgroupSupport().memory) {
    EXPECT_NE(limits.find(std::to_string(80ull << 20)), std::string::npos) << limits;
  }
}

TEST(RunCgroupTest, TheDirsAreRemovedWhenTheProcessExitsOrDies) {
  SKIP_WITHOUT_CGROUPS();
  for (const bool killed : {false, true}) {
    int names[2];
    ASSERT_EQ(::pipe(names), 0);
    const pid_t child = ::fork();
    if (child == 0) {  // makes a run cgroup, reports its dirs, then exits or waits to be killed
      {
        auto cg = RunCgroup::Create(4, 32ull << 20);
        std::string list;
        for (const std::string& d : cg.ok() ? cg->dirs() : std::vector<std::string>{})
          list += d + "\n";
        (void)!::write(names[1], list.data(), list.size());
      }
      ::close(names[1]);
      if (killed) ::pause();
      std::exit(0);  // runs the atexit clean-up
    }
    ::close(names[1]);
    std::string list;
    char buf[4096];
    for (ssize_t n; (n = ::read(names[0], buf, sizeof(buf))) > 0;) list.append(buf, size_t(n));
    ::close(names[0]);
    if (killed) ::kill(child, SIGKILL);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);
    std::vector<std::string> dirs;
    std::istringstream lines(list);
    for (std::string d; std::getline(lines, d);) dirs.push_back(d);
    ASSERT_FALSE(dirs.empty());
    if (killed) {  // a dead process's dirs go at the next sweep (each process's probe does one)
      for (const std::string& d : dirs) EXPECT_TRUE(DirExists(d)) << d;
      RemoveStaleRunCgroups();
    }
    for (const std::string& d : dirs)
      EXPECT_FALSE(DirExists(d)) << d << (killed ? " (killed)" : "");
  }
}

TEST(RunCgroupTest, LeftoverProcessesAreKilledWhenTheRunEnds) {
  SKIP_WITHOUT_CGROUPS();
  std::vector<std::string> dirs;
  pid_t child = -1;
  {
    auto cg = RunCgroup::Create(8, 64ull << 20);
    ASSERT_TRUE(cg.ok()) << cg.status().ToString();
    dirs = cg->dirs();
    const std::vector<std::string> join = cg->join_files();
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    child = ::fork();
    if (child == 0) {  // joins the way the sandbox helper does, then lingers
      for (const std::string& f : join) {
        std::ofstream(f) << "0";
      }
      (void)!::write(ready[1], "x", 1);
      for (;;) ::pause();
    }
    char c;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    ::close(ready[1]);
    for (const std::string& d : dirs)
      EXPECT_NE(Read(d + "/cgroup.procs").find(std::to_string(child)), std::string::npos);
  }
  // Polled, so that a run that leaves it alive fails instead of hanging.
  const marlaas::testing::ChildExit gone = marlaas::testing::WaitChildFor(child, 30);
  ASSERT_FALSE(gone.timed_out) << "the run's end did not kill the leftover process";
  EXPECT_EQ(gone.signal, SIGKILL);
  for (const std::string& d : dirs) EXPECT_TRUE(EmptyOrGone(d)) << d;
}

// Six processes of 100 MiB: each is under RLIMIT_AS (256 MiB); the run is not under 256 MiB.
const char kSpreadBomb[] =
    "import os\nkids = []\nfor i in range(6):\n  pid = os.fork()\n  if pid == 0:\n"
    "    b = bytearray(100 << 20)\n    for j in range(0, len(b), 4096): b[j] = 1\n"
    "    os._exit(0)\n  kids.append(pid)\n"
    "print(sum(os.waitpid(k, 0)[1] != 0 for k in kids))";

SandboxResult RunIn(const std::string& python, bool cgroup_limits = true) {
  SandboxRequest r;
  r.argv = {"/usr/bin/python3", "-I", "-S", "-c", python};
  r.limits.wall_timeout_ms = 10000;
  r.limits.cgroup_limits = cgroup_limits;
  auto res = RunSandboxed(r);
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  return res.ok() ? *res : SandboxResult{};
}

SandboxResult RunBomb(bool cgroup_limits) { return RunIn(kSpreadBomb, cgroup_limits); }

TEST(RunCgroupTest, MemoryLimitBoundsTheWholeRun) {
  if (!HostCgroupSupport().memory)
    GTEST_SKIP() << "no cgroup memory limit on this host: " << HostCgroupSupport().detail;
  const SandboxResult limited = RunBomb(true);
  EXPECT_TRUE(limited.cgroup_limited);
  EXPECT_EQ(limited.outcome, SandboxOutcome::kMemoryLimit)
      << SandboxOutcomeName(limited.outcome) << " " << limited.stdout_data << limited.stderr_data;
  // The control: rlimits alone let all six through, so the cgroup is what stopped them.
  const SandboxResult unlimited = RunBomb(false);
  EXPECT_FALSE(unlimited.cgroup_limited);
  EXPECT_EQ(unlimited.outcome, SandboxOutcome::kExited) << unlimited.stderr_data;
  EXPECT_EQ(unlimited.stdout_data, "0\n");
  // A reused cgroup counts only its own run's kills.
  const SandboxResult after = RunIn("print(1)");
  EXPECT_EQ(after.outcome, SandboxOutcome::kExited) << SandboxOutcomeName(after.outcome);
}

TEST(RunCgroupTest, PidsLimitBoundsTheRun) {
  if (!HostCgroupSupport().pids)
    GTEST_SKIP() << "no cgroup pids limit on this host: " << HostCgroupSupport().detail;
  auto cg = RunCgroup::Create(3, 64ull << 20);
  ASSERT_TRUE(cg.ok()) << cg.status().ToString();
  const std::vector<std::string> join = cg->join_files();
  const pid_t child = ::fork();
  if (child == 0) {  // in the cgroup (1 pid), try to fork 5 more that wait
    for (const std::string& f : join) std::ofstream(f) << "0";
    int forked = 0;
    for (int i = 0; i < 5; ++i) {
      const pid_t p = ::fork();
      if (p == 0) {
        ::sleep(2);
        ::_exit(0);
      }
      forked += p > 0;
    }
    ::_exit(forked);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2) << "pids.max 3 should leave room for two children";
}

}  // namespace
}  // namespace marlaas::sandbox

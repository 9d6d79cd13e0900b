// Sandboxes prepared ahead: each run still gets a sandbox of its own, the request's limits apply
// although the sandbox was built before the request, and the pool leaves no process behind.
#include "sandbox/sandbox_pool.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "sandbox/run_cgroup.h"
#include "sandbox/sandbox.h"

namespace marlaas::sandbox {
namespace {

SandboxResult Python(const std::string& code, SandboxLimits limits = {}) {
  SandboxRequest r;
  r.argv = {"/usr/bin/python3", "-I", "-S", "-c", code};
  r.limits = limits;
  auto res = RunSandboxed(r);
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  return res.ok() ? *res : SandboxResult{};
}

// Children of this process, over all its threads (the pool's refill thread forks the helpers).
int ChildProcesses() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/task");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/children");
    for (int pid; f >> pid;) ++n;
  }
  if (d) ::closedir(d);
  return n;
}

bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

class SandboxPoolTest : public ::testing::Test {
 protected:
  void SetUp() override { SetPreparedSandboxPool(2); }
  void TearDown() override { SetPreparedSandboxPool(0); }
};

TEST_F(SandboxPoolTest, PreparedSandboxesAreReadyAndTaken) {
  const bool cgroup = HostCgroupSupport().pids || HostCgroupSupport().memory;
  ASSERT_TRUE(WaitFor([] { return ChildProcesses() >= 2; })) << "the pool prepared nothing";
  auto taken = TakePreparedSandbox(cgroup);
  ASSERT_TRUE(taken.has_value());
  EXPECT_TRUE(taken->SetUpAlive());
  EXPECT_FALSE(TakePreparedSandbox(!cgroup).has_value()) << "only the host's kind is prepared";
}

TEST_F(SandboxPoolTest, EachRunGetsAFreshSandbox) {
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(WaitFor([] { return ChildProcesses() >= 2; }));
    // A file left by the previous run, and a process it left running, must not be seen.
    const SandboxResult r = Python(
        "import os\nprint(os.path.exists('/work/mark'), sorted(os.listdir('/proc'))[:0], "
        "len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
        "open('/work/mark', 'w').write('x')\n"
        "if os.fork() == 0:\n  import time; time.sleep(30)\n");
    EXPECT_EQ(r.outcome, SandboxOutcome::kExited) << r.stderr_data << r.setup_error;
    EXPECT_TRUE(r.prepared_ahead) << "run " << i << " did not use a prepared sandbox";
    EXPECT_EQ(r.stdout_data, "False [] 1\n") << "run " << i;
  }
}

TEST_F(SandboxPoolTest, TheRequestsLimitsApplyToAPreparedSandbox) {
  ASSERT_TRUE(WaitFor([] { return ChildProcesses() >= 2; }));
  SandboxLimits small;
  small.work_dir_bytes = 1 << 20;  // the pool built /work at its default (16 MiB)
  const SandboxResult full = Python(
      "try:\n  open('/work/big', 'wb').write(b'x' * (4 << 20)); print('wrote')\n"
      "except OSError as e: print('full', e.errno)",
      small);
  EXPECT_EQ(full.stdout_data, "full 28\n") << full.stderr_data;
  EXPECT_TRUE(full.prepared_ahead);
  if (HostCgroupSupport().memory) {
    // Six processes of 100 MiB: over a 256 MiB run limit, under a 1 GiB one.
    const std::string bomb =
        "import os\nkids = []\nfor i in range(6):\n  pid = os.fork()\n  if pid == 0:\n"
        "    b = bytearray(100 << 20)\n    for j in range(0, len(b), 4096): b[j] = 1\n"
        "    os._exit(0)\n  kids.append(pid)\n"
        "print(sum(os.waitpid(k, 0)[1] != 0 for k in kids))";
    SandboxLimits big;
    big.memory_bytes = 1ull << 30;
    big.wall_timeout_ms = 10000;
    ASSERT_TRUE(WaitFor([] { return ChildProcesses() >= 2; }));
    const SandboxResult roomy = Python(bomb, big);
    EXPECT_TRUE(roomy.prepared_ahead);
    EXPECT_EQ(roomy.outcome, SandboxOutcome::kExited) << roomy.stderr_data;
    EXPECT_EQ(roomy.stdout_data, "0\n");
    SandboxLimits tight = big;
    tight.memory_bytes = 256ull << 20;
    ASSERT_TRUE(WaitFor([] { return ChildProcesses() >= 2; }));
    const SandboxResult killed = Python(bomb, tight);
    EXPECT_TRUE(killed.prepared_ahead);
    EXPECT_EQ(killed.outcome, SandboxOutcome::kMemoryLimit);
  }
}

TEST_F(SandboxPoolTest, DroppingThePoolLeavesNoProcess) {
  ASSERT_TRUE(WaitFor([] { return ChildProcesses() >= 2; }));
  SetPreparedSandboxPool(0);
  EXPECT_TRUE(WaitFor([] { return ChildProcesses() == 0; }))
      << ChildProcesses() << " processes left";
  // Turned off while the refill thread is preparing: what it finishes afterwards is not kept.
  for (int i = 0; i < 30; ++i) {
    SetPreparedSandboxPool(2);
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (i % 5)));
    SetPreparedSandboxPool(0);
  }
  EXPECT_TRUE(WaitFor([] { return ChildProcesses() == 0; }))
      << ChildProcesses() << " processes left";
  const bool cgroup = HostCgroupSupport().pids || HostCgroupSupport().memory;
  EXPECT_FALSE(TakePreparedSandbox(cgroup).has_value());
}

}  // namespace
}  // namespace marlaas::sandbox

#include "sandbox/escape_suite.h"

#include <dirent.h>
#include <seccomp.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "sandbox/run_cgroup.h"
#include "sandbox/seccomp_filter.h"

namespace marlaas::sandbox {
namespace {

SandboxRequest Sh(const std::string& script, SandboxLimits limits = {}) {
  SandboxRequest r;
  r.argv = {"/bin/sh", "-c", script};
  r.limits = limits;
  return r;
}

SandboxRequest Py(const std::string& code, SandboxLimits limits = {}) {
  SandboxRequest r;
  r.argv = {"/usr/bin/python3", "-I", "-S", "-c", code};
  r.limits = limits;
  return r;
}

std::string Expect(bool ok, const std::string& why, const SandboxResult& r) {
  if (ok) return "";
  return why + " (outcome " + SandboxOutcomeName(r.outcome) + ", exit " +
         std::to_string(r.exit_code) + ", signal " + std::to_string(r.signal) + ", stdout '" +
         r.stdout_data.substr(0, 300) + "', stderr '" + r.stderr_data.substr(0, 300) + "'" +
         (r.setup_error.empty() ? "" : ", setup: " + r.setup_error) + ")";
}

// No process with this marker may survive the run.
std::string NoSurvivors(const std::string& marker) {
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const int n = CountHostProcesses(marker);
  return n == 0 ? "" : std::to_string(n) + " '" + marker + "' process(es) outlived the sandbox";
}

bool Exited(const SandboxResult& r) { return r.outcome == SandboxOutcome::kExited; }

// Calls each syscall (name, number) with zero arguments; every one must fail with `err`.
EscapeCase SyscallsFailWith(const std::string& name,
                            const std::vector<std::pair<std::string, int>>& calls, int err,
                            const std::string& why) {
  std::string list;
  for (const auto& [call, nr] : calls) list += "('" + call + "', " + std::to_string(nr) + "), ";
  return {
      name,
      Py("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nbad = []\nfor name, nr in [" +
         list + "]:\n    ctypes.set_errno(0)\n    r = libc.syscall(nr, 0, 0, 0, 0, 0, 0)\n" +
         "    if r != -1 or ctypes.get_errno() != " + std::to_string(err) +
         ": bad.append('%s:%d/%d' % (name, r, ctypes.get_errno()))\nprint('reached:', *bad)"),
      [why](const SandboxResult& r) {
        return Expect(Exited(r) && r.stdout_data == "reached:\n", why, r);
      }};
}

}  // namespace

int CountHostProcesses(const std::string& needle) {
  int n = 0;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    for (char& c : cmd)
      if (c == '\0') c = ' ';
    n += cmd.find(needle) != std::string::npos;
  }
  ::closedir(d);
  return n;
}

std::vector<EscapeCase> EscapeSuite() {
  std::vector<EscapeCase> s;
  SandboxLimits quick;
  quick.wall_timeout_ms = 400;
  s.push_back({"sleep_past_wall_limit_with_background_setsid_and_double_fork",
               Sh("sleep 4242 & setsid sleep 4243 & (sleep 4244 &) ; sleep 4245", quick),
               [](const SandboxResult& r) {
                 std::string e = Expect(r.outcome == SandboxOutcome::kTimeout, "not timed out", r);
                 for (const char* m : {"sleep 4242", "sleep 4243", "sleep 4244", "sleep 4245"}) {
                   if (e.empty()) e = NoSurvivors(m);
                 }
                 return e;
               }});
  s.push_back({"children_left_behind_by_an_exiting_program", Sh("(sleep 4246 &); exit 0"),
               [](const SandboxResult& r) {
                 std::string e = Expect(Exited(r), "did not exit", r);
                 return e.empty() ? NoSurvivors("sleep 4246") : e;
               }});
  SandboxLimits bomb;
  bomb.wall_timeout_ms = 1500;
  s.push_back({"fork_bomb", Sh("echo bombing; b() { b | b & }; b; sleep 4247", bomb),
               [](const SandboxResult& r) {
                 // It must really have run (a sandbox that failed to start contains nothing).
                 std::string e = Expect(r.outcome != SandboxOutcome::kSetupFailed &&
                                            r.stdout_data.rfind("bombing\n", 0) == 0,
                                        "the bomb never ran", r);
                 return e.empty() ? NoSurvivors("sleep 4247") : e;
               }});
  s.push_back({"memory_bomb", Py("x = bytearray(2 * 1024**3)"), [](const SandboxResult& r) {
                 return Expect(Exited(r) && r.exit_code != 0 &&
                                   r.stderr_data.find("MemoryError") != std::string::npos,
                               "allocation was not refused", r);
               }});
  if (HostCgroupSupport().memory) {
    // Six processes of 100 MiB each stay under RLIMIT_AS (per process) but not under the run's
    // cgroup limit of 256 MiB: the kernel kills at the limit. Each child holds its memory for a
    // while: children that ran one after another on a loaded host never held more than the limit
    // together (seen once in CI: every child finished, exit 0).
    SandboxLimits hold;
    hold.wall_timeout_ms = 8000;
    s.push_back({"memory_bomb_spread_over_processes",
                 Py("import os, time\nkids = []\nfor i in range(6):\n  pid = os.fork()\n"
                    "  if pid == 0:\n    b = bytearray(100 << 20)\n"
                    "    for j in range(0, len(b), 4096): b[j] = 1\n"
                    "    time.sleep(2)\n    os._exit(0)\n"
                    "  kids.append(pid)\nfor k in kids: os.waitpid(k, 0)",
                    hold),
                 [](const SandboxResult& r) {
                   return Expect(r.outcome == SandboxOutcome::kMemoryLimit,
                                 "the run's memory was not bounded", r);
                 }});
  }
  SandboxLimits cpu;
  cpu.cpu_seconds = 1;
  cpu.wall_timeout_ms = 5000;
  s.push_back({"cpu_spin", Py("while True: pass", cpu), [](const SandboxResult& r) {
                 return Expect(r.outcome == SandboxOutcome::kSignaled &&
                                   (r.signal == SIGXCPU || r.signal == SIGKILL),
                               "not stopped by the CPU limit", r);
               }});
  SandboxLimits out;
  out.max_output_bytes = 1 << 20;
  s.push_back(
      {"gigabyte_of_stdout",
       Py("import sys\nb = b'x' * (1 << 20)\nfor _ in range(1024): sys.stdout.buffer.write(b)",
          out),
       [](const SandboxResult& r) {
         return Expect(r.outcome == SandboxOutcome::kOutputLimit && r.stdout_truncated &&
                           r.stdout_data.size() == (1u << 20),
                       "output not capped", r);
       }});
  s.push_back({"fill_the_work_dir",
               Py("import os\ntry:\n  open('/work/big','wb').write(b'x' * (64 << 20))\nexcept "
                  "OSError as e: print('full', e.errno)\n"
                  "n = 0\ntry:\n  while n < 100000:\n    open('/work/f%d' % n, 'w').close(); n += "
                  "1\nexcept OSError as e: print('inodes', e.errno)"),
               [](const SandboxResult& r) {
                 // EFBIG (27): the file-size limit; ENOSPC (28): the work dir's size or inodes.
                 return Expect(Exited(r) &&
                                   (r.stdout_data.find("full 27") != std::string::npos ||
                                    r.stdout_data.find("full 28") != std::string::npos) &&
                                   r.stdout_data.find("inodes 28") != std::string::npos,
                               "the work dir was not limited", r);
               }});
  s.push_back(
      {"read_host_files",
       Py("import os\n"
          "print([p for p in ['/etc/shadow', '/etc/passwd', '/root', '/home', '/dev/shm', '/var',"
          " '/sys', '/run'] if os.path.exists(p)])\n"
          "print('HOME=/work' in open('/proc/self/environ').read())"),
       [](const SandboxResult& r) {
         return Expect(Exited(r) && r.stdout_data == "[]\nTrue\n", "a host path is visible", r);
       }});
  // The cgroup namespace: the run sees its own cgroup as the root, nothing of the host's tree.
  s.push_back({"host_cgroup_paths_are_hidden", Sh("cut -d: -f3 /proc/self/cgroup | sort -u"),
               [](const SandboxResult& r) {
                 return Expect(Exited(r) && r.stdout_data == "/\n", "a host cgroup path shows", r);
               }});
  s.push_back({"write_outside_the_work_dir",
               Py("for p in ['/usr/evil', '/evil', '/bin/evil', '/proc/evil', '/dev/evil']:\n"
                  "    try:\n        open(p, 'w'); print('wrote', p)\n    except OSError: pass\n"
                  "open('/work/ok', 'w').write('x'); print('done')"),
               [](const SandboxResult& r) {
                 return Expect(Exited(r) && r.stdout_data == "done\n", "wrote outside /work", r);
               }});
  s.push_back({"symlink_and_dotdot_escapes",
               Sh("ln -s /proc/1/root/etc/shadow /work/s; cat /work/s 2>&1 | head -c 0; "
                  "cat /work/../../etc/shadow 2>/dev/null && echo leaked; "
                  "ls /proc/1/root/ | tr '\\n' ' '"),
               [](const SandboxResult& r) {
                 return Expect(Exited(r) && r.stdout_data.find("leaked") == std::string::npos &&
                                   r.stdout_data.find("etc") == std::string::npos,
                               "escaped through a link", r);
               }});
  s.push_back({"network_tcp_udp_dns_and_loopback",
               Py("import socket\n"
                  "for fam, kind in [(socket.AF_INET, socket.SOCK_STREAM), (socket.AF_INET, "
                  "socket.SOCK_DGRAM),"
                  " (socket.AF_INET6, socket.SOCK_STREAM), (socket.AF_NETLINK, socket.SOCK_RAW)]:\n"
                  "    try:\n        socket.socket(fam, kind); print('open')\n"
                  "    except OSError as e: print('refused', e.errno)\n"
                  "try:\n    socket.getaddrinfo('example.com', 80); print('resolved')\n"
                  "except OSError: print('no dns')\n"),
               [](const SandboxResult& r) {
                 return Expect(
                     Exited(r) &&
                         r.stdout_data == "refused 1\nrefused 1\nrefused 1\nrefused 1\nno dns\n",
                     "a network socket opened", r);
               }});
  // PTRACE_ATTACH to a process of the same run (a parent on its own child passes every
  // permission check but seccomp's), a tmpfs mount and a new user namespace (both allowed to the
  // run's root in its own namespaces but for seccomp), setns, and clone3 (refused as a whole with
  // ENOSYS: seccomp cannot read its flags). The errnos tell seccomp's refusal from any other.
  s.push_back(
      {"ptrace_a_sibling_mount_unshare_setns",
       Py("import ctypes, subprocess\nlibc = ctypes.CDLL(None, use_errno=True)\n"
          "p = subprocess.Popen(['/usr/bin/sleep', '30'])\n"
          "calls = [lambda: libc.ptrace(16, p.pid, None, None), lambda: libc.mount(b'none', "
          "b'/work', b'tmpfs', 0, None), lambda: libc.unshare(0x10000000), lambda: libc.setns(0, "
          "0x10000000), lambda: libc.syscall(435, None, 0)]\nout = []\nfor c in calls:\n"
          "    ctypes.set_errno(0); r = c(); out.append('%d/%d' % (r, ctypes.get_errno()))\n"
          "p.kill(); p.wait(); print(*out)"),
       [](const SandboxResult& r) {
         return Expect(Exited(r) && r.stdout_data == "-1/1 -1/1 -1/1 -1/1 -1/38\n",
                       "a privileged call was not refused by seccomp", r);
       }});
  // Every syscall of the deny list, called with zero arguments: EPERM from the filter, whatever
  // the kernel would have said to the arguments.
  std::vector<std::pair<std::string, int>> denied;
  for (const std::string& name : DeniedSyscallNames()) {
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr >= 0) denied.emplace_back(name, nr);
  }
  s.push_back(SyscallsFailWith("every_denied_syscall_fails_with_eperm", denied, EPERM,
                               "a denied syscall was not refused"));
  // Every syscall newer than the filter's library (listmount, statmount, open_tree_attr on a
  // 6.x kernel): ENOSYS from the filter, whatever the kernel has.
  std::vector<std::pair<std::string, int>> newer;
  for (int nr : NewerSyscallNumbers()) newer.emplace_back(std::to_string(nr), nr);
  s.push_back(SyscallsFailWith("syscalls_newer_than_the_filter_fail_with_enosys", newer, ENOSYS,
                               "a syscall newer than the filter was reached"));
  // /proc/<pid>/mem writes pass page protections, so what matters is whose memory is reachable:
  // the program pokes its own memory through /proc/self/mem (allowed for any process), and the
  // only process it can see (PID 2: its init, PID 1, is hidden), hence the only mem file it can
  // open, is its own.
  s.push_back({"write_proc_self_mem",
               Py("import ctypes, os\nb = ctypes.create_string_buffer(b'original')\n"
                  "with open('/proc/self/mem', 'r+b', buffering=0) as f:\n"
                  "    f.seek(ctypes.addressof(b)); f.write(b'poked!!!')\n"
                  "print(b.value.decode(), sorted(int(p) for p in os.listdir('/proc') if "
                  "p.isdigit()))"),
               [](const SandboxResult& r) {
                 return Expect(Exited(r) && r.stdout_data == "poked!!! [2]\n",
                               "another process's memory was reachable", r);
               }});
  s.push_back({"setuid_binaries_gain_nothing",
               Sh("for b in /usr/bin/su /usr/bin/passwd /usr/bin/mount; do [ -u $b ] && $b --help "
                  ">/dev/null 2>&1; done; id -u"),
               [](const SandboxResult& r) {
                 return Expect(Exited(r) && r.stdout_data == "0\n", "identity changed", r);
               }});
  // The program is uid 0 of its user namespace, yet holds no capability, now or after an
  // execve, and cannot write the namespaces' sysctls.
  s.push_back(
      {"no_capabilities_and_read_only_sysctls",
       Py("import subprocess\n"
          "caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Cap')]\n"
          "child = subprocess.run(['/bin/grep', '^CapEff', '/proc/self/status'],\n"
          "                       capture_output=True, text=True).stdout.split()[1]\n"
          "try:\n    open('/proc/sys/kernel/hostname', 'w').write('x'); w = 'written'\n"
          "except OSError as e: w = e.errno\n"
          "print(*caps, child, w)"),
       [](const SandboxResult& r) {
         const std::string zero = "0000000000000000";
         std::string want;
         for (int i = 0; i < 6; ++i) want += zero + " ";
         return Expect(Exited(r) && r.stdout_data == want + "30\n",
                       "a capability or a writable sysctl was left", r);
       }});
  // Another process's priority, affinity and rlimits (which it would pass on to the processes it
  // forks) are out of reach; the program's own are not.
  s.push_back(
      {"another_process_priority_affinity_and_limits",
       Py("import os, resource, subprocess\np = subprocess.Popen(['/usr/bin/sleep', '30'])\n"
          "calls = [lambda: os.setpriority(os.PRIO_PROCESS, p.pid, 19),\n"
          "         lambda: os.setpriority(os.PRIO_USER, 0, 19),\n"
          "         lambda: os.sched_setaffinity(p.pid, {0}),\n"
          "         lambda: resource.prlimit(p.pid, resource.RLIMIT_NOFILE, (8, 8)),\n"
          "         lambda: os.sched_setscheduler(p.pid, os.SCHED_BATCH, os.sched_param(0)),\n"
          "         lambda: os.sched_setparam(p.pid, os.sched_param(0))]\n"
          "out = []\nfor c in calls:\n    try: c(); out.append('done')\n"
          "    except OSError as e: out.append(str(e.errno))\n"
          "os.setpriority(os.PRIO_PROCESS, 0, 5)\n"
          "resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))\n"
          "os.sched_setaffinity(0, os.sched_getaffinity(0))\n"
          "p.kill(); p.wait(); print(*out, os.getpriority(os.PRIO_PROCESS, 0))"),
       [](const SandboxResult& r) {
         return Expect(Exited(r) && r.stdout_data == "1 1 1 1 1 1 5\n",
                       "another process's priority, affinity or limits were changed", r);
       }});
  // Renicing its scheduler autogroup (a session's) reaches only its own session.
  s.push_back({"renice_the_session_it_was_started_in",
               Py("try: open('/proc/self/autogroup', 'w').write('19'); print('reniced')\n"
                  "except OSError as e: print('refused', e.errno)"),
               [](const SandboxResult& r) {
                 std::ifstream f("/proc/self/autogroup");
                 std::string group, word, nice = "0";
                 f >> group >> word >> nice;
                 return Expect(Exited(r) && (!f || nice == "0"),
                               "the caller's session was reniced to " + nice, r);
               }});
  s.push_back({"kill_everything_it_can_see",
               Py("import os, signal, subprocess\np = subprocess.Popen(['/usr/bin/sleep', '30'])\n"
                  "print(os.getpid())\nos.kill(-1, signal.SIGKILL)\nprint('child', p.wait())"),
               [](const SandboxResult& r) {
                 return Expect(Exited(r) && r.stdout_data == "2\nchild -9\n",
                               "kill(-1) reached outside", r);
               }});
  return s;
}

EscapeReport RunEscapeCase(const EscapeCase& c) {
  EscapeReport rep;
  rep.name = c.name;
  auto res = RunSandboxed(c.request);
  if (!res.ok()) {
    rep.detail = res.status().ToString();
    return rep;
  }
  rep.wall_ms = res->wall_ms;
  rep.detail = c.contained(*res);
  rep.contained = rep.detail.empty();
  return rep;
}

}  // namespace marlaas::sandbox

#include "sandbox/run_cgroup.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "base/cgroup_hierarchy.h"

namespace marlaas::sandbox {

// A cgroup set (one dir per hierarchy) outlives its run: creating and removing memory cgroups
// costs the kernel more than reusing them (measured with bench_sandbox: p99 of a python run 8 ms
// -> 15-23 ms with a fresh cgroup per run). A set goes back to the pool only once it is empty;
// counters are compared against their value when the run began.
struct CgroupSet {
  std::vector<std::string> dirs, join_files;
  std::string memory_dir;
  std::string pids_limit, memory_limit;  // as last written
  pid_t owner = 0;                       // a forked child does not take its parent's sets
};

namespace {

constexpr char kParentName[] = "marlaas-sandbox";

bool WriteText(const std::string& path, const std::string& text, std::string* error = nullptr) {
  std::ofstream f(path);
  f << text;
  f.flush();
  if (f) return true;
  if (error) *error = "cannot write '" + text + "' to " + path + ": " + std::strerror(errno);
  return false;
}

std::string ReadText(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// The value of `key` in a "key value" per line file (memory.events, memory.oom_control); -1 when
// absent.
int64_t KeyedValue(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  std::string k;
  int64_t v;
  while (lines >> k >> v)
    if (k == key) return v;
  return -1;
}

// Kills whatever is left in `dir` and removes it; waits at most about a second.
void RemoveCgroup(const std::string& dir, bool v2) {
  for (int attempt = 0; attempt < 500; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return;
    if (errno != EBUSY) break;
    if (v2 && Exists(dir + "/cgroup.kill")) {
      WriteText(dir + "/cgroup.kill", "1");
    } else {
      std::istringstream pids(ReadText(dir + "/cgroup.procs"));
      for (pid_t pid; pids >> pid;) ::kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::fprintf(stderr, "marlaas sandbox: cannot remove cgroup %s: %s\n", dir.c_str(),
               std::strerror(errno));
}

// Removes run dirs under `parent` whose creating process is gone (a killed verifier's). With
// `include_own` (at the probe, before this process made any), also those named with our pid: a
// dead process that had it before us left them.
void RemoveStaleRuns(const std::string& parent, bool v2, bool include_own) {
  DIR* d = ::opendir(parent.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    long pid = 0;
    if (std::sscanf(e->d_name, "run-%ld-", &pid) != 1 || pid <= 0) continue;
    if (pid == ::getpid() ? include_own : ::kill(pid_t(pid), 0) != 0 && errno == ESRCH)
      stale.push_back(parent + "/" + e->d_name);
  }
  ::closedir(d);
  for (const std::string& dir : stale) RemoveCgroup(dir, v2);
}

// Where runs go, per limit; empty when that limit is not available.
struct Layout {
  CgroupSupport support;
  bool v2 = false;
  std::string pids_parent, memory_parent;  // the same dir under v2
  bool v1_memsw = false;
};

// Makes `parent` (ours/marlaas-sandbox) and checks a run dir can be created in it with `files`.
bool PrepareParent(const std::string& own_dir, const std::vector<std::string>& files,
                   std::string* parent, std::string* why) {
  *parent = own_dir + "/" + kParentName;
  if (::mkdir(parent->c_str(), 0755) != 0 && errno != EEXIST) {
    *why = "cannot create " + *parent + ": " + std::strerror(errno);
    return false;
  }
  const std::string probe = *parent + "/probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    *why = "cannot create " + probe + ": " + std::strerror(errno);
    return false;
  }
  bool ok = true;
  for (const std::string& f : files) {
    if (!Exists(probe + "/" + f)) {
      *why = probe + " has no " + f;
      ok = false;
      break;
    }
  }
  ::rmdir(probe.c_str());
  return ok;
}

Layout ProbeLayout() {
  Layout L;
  std::string why_v2 = "no cgroup2 mount", why_v1;
  CgroupHierarchy h;
  if (FindCgroupHierarchy("", &h)) {
    const std::string available = ReadText(h.own_dir + "/cgroup.controllers");
    if (!HasListWord(available, "memory", ' ') || !HasListWord(available, "pids", ' ')) {
      why_v2 = "cgroup v2 at " + h.own_dir + " does not offer the memory and pids controllers";
    } else {
      const std::string enabled = ReadText(h.own_dir + "/cgroup.subtree_control");
      std::string parent;
      // Enabling controllers below a cgroup that holds processes fails (EBUSY) unless it is the
      // root: then the subtree is not delegated to us and we fall back.
      if ((HasListWord(enabled, "memory", ' ') && HasListWord(enabled, "pids", ' ')) ||
          WriteText(h.own_dir + "/cgroup.subtree_control", "+memory +pids", &why_v2)) {
        if (PrepareParent(h.own_dir, {}, &parent, &why_v2) &&
            WriteText(parent + "/cgroup.subtree_control", "+memory +pids", &why_v2) &&
            PrepareParent(h.own_dir, {"memory.max", "pids.max"}, &parent, &why_v2)) {
          L.v2 = true;
          L.pids_parent = L.memory_parent = parent;
          L.support = {true, true, "v2", "cgroup v2 under " + parent};
          RemoveStaleRuns(parent, true, true);
          return L;
        }
      }
    }
  }
  std::string where;
  if (FindCgroupHierarchy("pids", &h)) {
    std::string parent, why;
    if (PrepareParent(h.own_dir, {"pids.max"}, &parent, &why)) {
      L.pids_parent = parent;
      where += "pids under " + parent;
      RemoveStaleRuns(parent, false, true);
    } else {
      why_v1 += "v1 pids: " + why + "; ";
    }
  } else {
    why_v1 += "no v1 pids hierarchy; ";
  }
  if (FindCgroupHierarchy("memory", &h)) {
    std::string parent, why;
    if (PrepareParent(h.own_dir, {"memory.limit_in_bytes"}, &parent, &why)) {
      L.memory_parent = parent;
      L.v1_memsw = Exists(parent + "/memory.memsw.limit_in_bytes");
      where += std::string(where.empty() ? "" : ", ") + "memory under " + parent;
      RemoveStaleRuns(parent, false, true);
    } else {
      why_v1 += "v1 memory: " + why + "; ";
    }
  } else {
    why_v1 += "no v1 memory hierarchy; ";
  }
  L.support.pids = !L.pids_parent.empty();
  L.support.memory = !L.memory_parent.empty();
  if (L.support.pids || L.support.memory) {
    L.support.version = "v1";
    L.support.detail = "cgroup v1: " + where;
    if (!why_v1.empty()) L.support.detail += " (" + why_v1.substr(0, why_v1.size() - 2) + ")";
  } else {
    L.support.detail = why_v2 + "; " + why_v1.substr(0, why_v1.size() - 2);
  }
  return L;
}

const Layout& HostLayout() {
  // Never destroyed: runs may end on other threads while the process exits.
  static const Layout* layout = new Layout(ProbeLayout());
  return *layout;
}

// Writes pids.max and the memory limit of `set` where they differ from what it holds.
Status WriteLimits(const Layout& L, CgroupSet* set, uint32_t max_pids, uint64_t memory_bytes) {
  std::string error;
  const std::string pids = std::to_string(max_pids), mem = std::to_string(memory_bytes);
  const std::string& pids_dir = set->dirs.front();  // v1: the pids dir comes first
  if (L.support.pids && set->pids_limit != pids) {
    if (!WriteText(pids_dir + "/pids.max", pids, &error))
      return Status(StatusCode::kInternal, error);
    set->pids_limit = pids;
  }
  if (L.support.memory && set->memory_limit != mem) {
    const std::string& d = set->memory_dir;
    // v1: memsw (memory + swap) must stay >= the memory limit: lift it, set memory, then memsw.
    const bool ok =
        L.v2 ? WriteText(d + "/memory.max", mem, &error) &&
                   (!Exists(d + "/memory.swap.max") || WriteText(d + "/memory.swap.max", "0"))
             : (!L.v1_memsw || WriteText(d + "/memory.memsw.limit_in_bytes", "-1", &error)) &&
                   WriteText(d + "/memory.limit_in_bytes", mem, &error) &&
                   (!L.v1_memsw || WriteText(d + "/memory.memsw.limit_in_bytes", mem, &error));
    if (!ok) {
      set->memory_limit.clear();
      return Status(StatusCode::kInternal, error);
    }
    set->memory_limit = mem;
  }
  return Status::Ok();
}

class CgroupPool {
 public:
  Result<std::unique_ptr<CgroupSet>> Acquire(const Layout& L, uint32_t max_pids,
                                             uint64_t memory_bytes) {
    std::unique_ptr<CgroupSet> set;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!set && !free_.empty()) {
        if (free_.back()->owner == ::getpid()) set = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!set) {
      set = std::make_unique<CgroupSet>();
      set->owner = ::getpid();
      const std::string name =
          "/run-" + std::to_string(::getpid()) + "-" + std::to_string(next_id_++);
      for (const std::string& parent : {L.pids_parent, L.memory_parent}) {
        if (parent.empty() || (L.v2 && !set->dirs.empty())) continue;  // v2: one dir for both
        const std::string dir = parent + name;
        if (::mkdir(dir.c_str(), 0755) != 0) {
          const Status error = ErrnoStatus("mkdir " + dir, errno);
          for (const std::string& d : set->dirs) RemoveCgroup(d, L.v2);
          return error;
        }
        set->dirs.push_back(dir);
        set->join_files.push_back(dir + "/cgroup.procs");
        if (parent == L.memory_parent) set->memory_dir = dir;
      }
    }
    const Status written = WriteLimits(L, set.get(), max_pids, memory_bytes);
    if (!written.ok()) return Discard(L, std::move(set), written.message());
    return set;
  }

  // Empties the set (kills what is left) and keeps it for the next run; removes it when it will
  // not empty.
  void Release(const Layout& L, std::unique_ptr<CgroupSet> set) {
    for (const std::string& d : set->dirs) {
      if (!Empty(d)) {
        for (const std::string& dir : set->dirs) RemoveCgroup(dir, L.v2);
        return;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(set));
  }

  // At exit: the pooled dirs go (a killed process's are removed by the next one's probe).
  void RemoveAll(const Layout& L) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& set : free_)
      if (set->owner == ::getpid())
        for (const std::string& d : set->dirs) RemoveCgroup(d, L.v2);
    free_.clear();
  }

 private:
  static Status Discard(const Layout& L, std::unique_ptr<CgroupSet> set, const std::string& why) {
    for (const std::string& d : set->dirs) RemoveCgroup(d, L.v2);
    return Status(StatusCode::kInternal, why);
  }
  // True once no process is left in `dir` nor counted by it; kills leftovers, waits at most
  // about a second.
  static bool Empty(const std::string& dir) {
    int unreaped = 0;
    for (int attempt = 0; attempt < 500 && unreaped < 50; ++attempt) {
      std::istringstream procs(ReadText(dir + "/cgroup.procs"));
      bool any = false;
      for (pid_t pid; procs >> pid;) {
        ::kill(pid, SIGKILL);
        any = true;
      }
      // Exited processes leave cgroup.procs before their parent reaps them, but count against
      // pids.max until then: the next run must start from zero. A zombie whose parent is slow
      // to reap it costs this set (removed instead of reused), not 1 s of waiting.
      if (!any) {
        if (!Exists(dir + "/pids.current") ||
            std::atoll(ReadText(dir + "/pids.current").c_str()) == 0) {
          return true;
        }
        ++unreaped;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }

  std::mutex mu_;
  std::vector<std::unique_ptr<CgroupSet>> free_;
  std::atomic<uint64_t> next_id_{0};
};

CgroupPool& Pool() {
  static CgroupPool* pool = [] {
    auto* p = new CgroupPool;  // never destroyed: runs may end on other threads during exit
    std::atexit([] { Pool().RemoveAll(HostLayout()); });
    return p;
  }();
  return *pool;
}

int64_t OomCount(const std::string& memory_dir, bool v2) {
  if (memory_dir.empty()) return 0;
  const int64_t kills = KeyedValue(
      ReadText(memory_dir + (v2 ? "/memory.events" : "/memory.oom_control")), "oom_kill");
  if (kills >= 0) return kills;
  // Kernels before 4.13 do not count v1 OOM kills; hitting the limit is the best evidence left.
  return std::atoll(ReadText(memory_dir + "/memory.failcnt").c_str());
}

}  // namespace

const CgroupSupport& HostCgroupSupport() {
  const Layout& L = HostLayout();
  (void)Pool();  // registers its exit handler early (sandbox_pool.cc relies on the order)
  return L.support;
}

void RemoveStaleRunCgroups() {
  const Layout& L = HostLayout();
  for (const std::string& parent : {L.pids_parent, L.memory_parent})
    if (!parent.empty()) RemoveStaleRuns(parent, L.v2, false);
}

Result<RunCgroup> RunCgroup::Create(uint32_t max_pids, uint64_t memory_bytes) {
  const Layout& L = HostLayout();
  if (!L.support.pids && !L.support.memory)
    return Status(StatusCode::kFailedPrecondition, "no cgroup limits: " + L.support.detail);
  MARLAAS_ASSIGN_OR_RETURN(std::unique_ptr<CgroupSet> set,
                           Pool().Acquire(L, max_pids, memory_bytes));
  RunCgroup run;
  run.oom_baseline_ = OomCount(set->memory_dir, L.v2);
  run.set_ = std::move(set);
  return run;
}

RunCgroup::RunCgroup() = default;
RunCgroup::RunCgroup(RunCgroup&& o) noexcept = default;

RunCgroup::~RunCgroup() {
  if (set_) Pool().Release(HostLayout(), std::move(set_));
}

const std::vector<std::string>& RunCgroup::join_files() const { return set_->join_files; }
const std::vector<std::string>& RunCgroup::dirs() const { return set_->dirs; }

Status RunCgroup::SetLimits(uint32_t max_pids, uint64_t memory_bytes) {
  return WriteLimits(HostLayout(), set_.get(), max_pids, memory_bytes);
}

bool RunCgroup::OomKilled() const {
  return OomCount(set_->memory_dir, HostLayout().v2) > oom_baseline_;
}

}  // namespace marlaas::sandbox

// `marlaas segments` and `marlaas clean`: inspect and remove shared-memory segments.
#include <cstdio>

#include "procs/cli/cli.h"
#include "sandbox/run_cgroup.h"
#include "sandbox/sandbox.h"
#include "shm/stale_segments.h"

namespace marlaas::cli {
namespace {

void PrintRow(const SegmentInfo& s, const char* verdict) {
  std::printf("%-44s %10llu  pid %-8d %-12s %s\n", ("/" + s.system_name).c_str(),
              static_cast<unsigned long long>(s.bytes), int(s.creator.pid),
              s.creator_alive ? "alive" : "exited", verdict);
}

}  // namespace

int RunSegments(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string instance;  // empty: every instance
  if (!TakeInstance(&args, "segments", &instance)) return 2;
  if (int rc = RejectRest("segments", args)) return rc;
  auto list = ListSegments(instance);
  if (!list.ok()) {
    std::fprintf(stderr, "marlaas segments: %s\n", list.status().message().c_str());
    return 1;
  }
  if (list->empty()) std::printf("no MARLaaS segments\n");
  for (const SegmentInfo& s : *list) PrintRow(s, s.stale() ? "stale" : "in use");
  return 0;
}

int RunClean(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  std::string instance;  // empty: every instance
  if (!TakeInstance(&args, "clean", &instance)) return 2;
  const bool dry_run = TakeSwitch(&args, "--dry-run");
  if (int rc = RejectRest("clean", args)) return rc;
  if (dry_run) {
    auto list = ListSegments(instance);
    if (!list.ok()) {
      std::fprintf(stderr, "marlaas clean: %s\n", list.status().message().c_str());
      return 1;
    }
    if (list->empty()) std::printf("no MARLaaS segments\n");
    for (const SegmentInfo& s : *list) PrintRow(s, s.stale() ? "would remove" : "kept (in use)");
    return 0;
  }
  auto removed = RemoveStaleSegments(instance);
  if (!removed.ok()) {
    std::fprintf(stderr, "marlaas clean: %s\n", removed.status().message().c_str());
    return 1;
  }
  for (const SegmentInfo& s : *removed) PrintRow(s, "removed");
  std::printf("removed %zu stale segment(s)\n", removed->size());
  // What killed sandbox runs leave: run cgroups of dead processes, old empty mount points.
  sandbox::RemoveStaleRunCgroups();
  const int roots = sandbox::RemoveStaleSandboxRoots();
  if (roots > 0) std::printf("removed %d stale sandbox root dir(s)\n", roots);
  return 0;
}

}  // namespace marlaas::cli

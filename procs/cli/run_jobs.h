// Runs a set of jobs on a fresh service until every tenant is done (or a time limit), printing
// the live table; shared by `marlaas serve` and `marlaas demo`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "procs/serve/monitor.h"
#include "procs/serve/service.h"

namespace marlaas::cli {

// The metrics log in the state dir, and its previous part once it has grown past
// kMetricsLogBytes (`marlaas report` reads both, the older first).
inline constexpr const char kMetricsLog[] = "metrics.jsonl";
inline constexpr const char kOlderMetricsLog[] = "metrics.1.jsonl";
inline constexpr uint64_t kMetricsLogBytes = 64ull << 20;

struct RunJobsOptions {
  serve::ServiceOptions service;
  std::vector<pb::JobSpec> jobs;
  // Stop after this long even with tenants unfinished (they stay on disk and resume on the next
  // service with the state dir; RunJobsReport::timed_out); 0: no limit.
  double timeout_s = 3600;
  double print_every_s = 2;
  bool quiet = false;
  // Listen on <state-dir>/control.sock for submit/status/stop/export/logs (control_server.h).
  bool control_socket = false;
  // Keep serving after every tenant is done, until SIGINT/SIGTERM (a service started with no
  // jobs, which takes its tenants over the control socket).
  bool until_stopped = false;
  // First admit again the unfinished tenants of the state dir (Service::ResumeTenants).
  bool resume = false;
  // Every job is checked before any is admitted (a refused one is an error naming it). Jobs that
  // find no room (max_tenants, the memory budget) wait and are admitted in order as tenants
  // settle; one that no longer passes its checks then, or that does not fit into an idle service,
  // is refused and named (RunJobsReport::refused), and the others go on.
  // Every print interval, append a line to <state-dir>/metrics.jsonl (metrics_export.h; rotated
  // to metrics.1.jsonl past kMetricsLogBytes).
  bool metrics_jsonl = false;
  // Serve Prometheus text on 127.0.0.1:port (0: any free port; -1: off).
  int metrics_port = -1;
};

struct RunJobsReport {
  bool timed_out = false;
  bool interrupted = false;  // until_stopped: ended by SIGINT/SIGTERM (serve exits 130)
  // Jobs that waited for room and were then refused (their reason was printed).
  std::vector<std::string> refused;
  double wall_s = 0;
  double rollout_util = 0, trainer_util = 0, verifier_util = 0;
  std::vector<serve::UtilSample> timeline;
  std::vector<serve::TenantView> tenants;  // final state
  int stage_restarts = 0;
};

Result<RunJobsReport> RunJobs(const RunJobsOptions& options);

}  // namespace marlaas::cli

#include "procs/cli/run_jobs.h"

#include <csignal>
#include <cstdio>
#include <thread>

#include "procs/common/pipeline.h"

namespace marlaas::cli {

Result<RunJobsReport> RunJobs(const RunJobsOptions& o) {
  MARLAAS_ASSIGN_OR_RETURN(std::unique_ptr<serve::Service> service,
                           serve::Service::Start(o.service));
  for (const pb::JobSpec& job : o.jobs) {
    Status st = service->Admit(job);
    if (!st.ok()) return st.Annotate("admitting tenant '" + job.tenant() + "'");
  }
  pipeline::InstallStopHandlers();  // Ctrl-C stops the run cleanly
  serve::Monitor monitor;
  RunJobsReport report;
  double next_print = o.print_every_s;
  while (!service->AllDone()) {
    if (pipeline::StopRequested()) return Status(StatusCode::kUnavailable, "interrupted");
    if (monitor.wall_s() > o.timeout_s) {
      report.timed_out = true;
      break;
    }
    service->Tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (monitor.wall_s() >= next_print) {
      monitor.Sample(*service);
      next_print += o.print_every_s;
      if (!o.quiet) std::printf("\n%s", monitor.Table(*service).c_str());
      std::fflush(stdout);
    }
  }
  monitor.Sample(*service);
  if (!o.quiet) std::printf("\n%s", monitor.Table(*service).c_str());
  report.wall_s = monitor.wall_s();
  report.rollout_util = monitor.Utilization("rollout");
  report.trainer_util = monitor.Utilization("trainer");
  report.verifier_util = monitor.Utilization("verifier");
  report.timeline = monitor.timeline();
  report.tenants = service->Tenants();
  for (const serve::StageView& s : service->Stages()) report.stage_restarts += s.restarts;
  service->Stop();
  return report;
}

}  // namespace marlaas::cli

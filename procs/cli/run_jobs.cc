#include "procs/cli/run_jobs.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "procs/common/pipeline.h"
#include "procs/serve/control_handler.h"
#include "procs/serve/control_server.h"
#include "procs/serve/metrics_export.h"
#include "procs/serve/tokens.h"

namespace marlaas::cli {

Result<RunJobsReport> RunJobs(const RunJobsOptions& o) {
  MARLAAS_ASSIGN_OR_RETURN(std::unique_ptr<serve::Service> service,
                           serve::Service::Start(o.service));
  std::vector<std::string> resumed;
  if (o.resume) {
    MARLAAS_ASSIGN_OR_RETURN(resumed, service->ResumeTenants());
  }
  // Jobs the service has no room for yet (every row taken, or the memory budget): admitted in
  // order as tenants settle and free theirs.
  std::vector<pb::JobSpec> waiting;
  for (const pb::JobSpec& job : o.jobs) {
    if (std::find(resumed.begin(), resumed.end(), job.tenant()) != resumed.end()) continue;
    const std::string dir = pipeline::TenantDir(o.service.stage.state_dir, job.tenant());
    if (o.resume && std::filesystem::exists(dir + "/job.json") &&
        !std::filesystem::exists(dir + "/state")) {
      // Unfinished on disk but not resumed now (no room): it resumes with a later service.
      std::fprintf(stderr, "tenant %s waits on disk: not resumed by this service\n",
                   job.tenant().c_str());
      continue;
    }
    Status st = waiting.empty() ? service->Admit(job)
                                : Status(StatusCode::kResourceExhausted, "jobs before it wait");
    if (st.code() == StatusCode::kResourceExhausted) {
      std::fprintf(stderr, "tenant %s waits for room: %s\n", job.tenant().c_str(),
                   st.message().c_str());
      waiting.push_back(job);
      continue;
    }
    if (!st.ok()) return st.Annotate("admitting tenant '" + job.tenant() + "'");
  }
  // Admits the waiting jobs that fit now, in order. One that does not fit into an idle service
  // never will: an error naming it.
  auto admit_waiting = [&]() -> Status {
    while (!waiting.empty()) {
      const bool idle = service->AllDone();
      Status st = service->Admit(waiting.front());
      if (st.code() == StatusCode::kResourceExhausted && !idle) return Status::Ok();
      if (!st.ok()) return st.Annotate("admitting tenant '" + waiting.front().tenant() + "'");
      if (!o.quiet) std::printf("tenant %s admitted\n", waiting.front().tenant().c_str());
      waiting.erase(waiting.begin());
    }
    return Status::Ok();
  };
  if (Status st = admit_waiting(); !st.ok()) return st;
  // Said when the run ends early: waiting jobs were never admitted, so nothing of them resumes.
  auto never_admitted = [&] {
    if (waiting.empty()) return;
    std::fprintf(stderr, "never admitted (no room before the run ended), give them again:");
    for (const pb::JobSpec& job : waiting) std::fprintf(stderr, " %s", job.tenant().c_str());
    std::fprintf(stderr, "\n");
  };
  pipeline::InstallStopHandlers(/*stop_with_parent=*/false);  // Ctrl-C stops the run cleanly
  std::optional<serve::Tokens> tokens;
  std::optional<serve::ControlServer> control;
  std::optional<serve::ControlHandler> handler;
  if (o.control_socket) {
    const std::string& dir = o.service.stage.state_dir;
    MARLAAS_ASSIGN_OR_RETURN(serve::Tokens t, serve::Tokens::Open(dir));
    tokens.emplace(std::move(t));
    MARLAAS_ASSIGN_OR_RETURN(serve::ControlServer s,
                             serve::ControlServer::Listen(dir + "/control.sock"));
    control.emplace(std::move(s));
    handler.emplace(service.get(), &*tokens);
    if (!o.quiet) {
      std::printf("control socket %s (admin token in %s/admin.token)\n", control->path().c_str(),
                  dir.c_str());
    }
  }
  std::optional<serve::MetricsHttp> metrics_http;
  if (o.metrics_port >= 0) {
    MARLAAS_ASSIGN_OR_RETURN(serve::MetricsHttp h, serve::MetricsHttp::Listen(o.metrics_port));
    metrics_http.emplace(std::move(h));
    std::printf("metrics: http://127.0.0.1:%d/metrics\n", metrics_http->port());
  }
  serve::Monitor monitor;
  RunJobsReport report;
  double next_print = o.print_every_s;
  while (o.until_stopped || !service->AllDone() || !waiting.empty()) {
    if (Status st = admit_waiting(); !st.ok()) {
      service->Stop();
      return st;
    }
    if (pipeline::StopRequested()) {
      never_admitted();
      if (o.until_stopped) {
        report.interrupted = true;
        break;
      }
      return Status(StatusCode::kCancelled,
                    "interrupted: unfinished tenants resume on the next serve with this state dir");
    }
    if (o.timeout_s > 0 && monitor.wall_s() > o.timeout_s) {
      report.timed_out = true;
      int unfinished = 0;
      for (const serve::TenantView& t : service->Tenants())
        unfinished += IsSettled(t.record.state) ? 0 : 1;
      std::fprintf(stderr,
                   "stopping after the time limit (%.0f s, --timeout-s): %d tenant(s) not done; "
                   "they resume on the next serve with this state dir\n",
                   o.timeout_s, unfinished);
      never_admitted();
      break;
    }
    service->Tick();
    if (!service->failure().ok()) {
      const Status failure = service->failure();
      service->Stop();
      return failure;
    }
    if (control) {
      control->Poll(50, [&](const pb::ControlRequest& r) { return handler->Handle(r); });
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (metrics_http) metrics_http->Serve([&] { return serve::PrometheusText(*service, monitor); });
    if (monitor.wall_s() >= next_print) {
      monitor.Sample(*service);
      next_print += o.print_every_s;
      if (o.metrics_jsonl) {
        pipeline::AppendLine(o.service.stage.state_dir + "/metrics.jsonl",
                             serve::MetricsJsonLine(*service, monitor));
      }
      if (!o.quiet) std::printf("\n%s", monitor.Table(*service).c_str());
      std::fflush(stdout);
    }
  }
  monitor.Sample(*service);
  // The final state too: a run shorter than print_every_s (or ended by a signal) still leaves a
  // line naming every tenant.
  if (o.metrics_jsonl) {
    pipeline::AppendLine(o.service.stage.state_dir + "/metrics.jsonl",
                         serve::MetricsJsonLine(*service, monitor));
  }
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

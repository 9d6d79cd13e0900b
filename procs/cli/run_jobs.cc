#include "procs/cli/run_jobs.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "base/file_util.h"
#include "procs/common/pipeline.h"
#include "procs/serve/control_handler.h"
#include "procs/serve/control_server.h"
#include "procs/serve/metrics_export.h"
#include "procs/serve/tokens.h"

namespace marlaas::cli {
namespace {

// <state>/metrics.jsonl gains a line every 2 s (about 10 MB a day idle, far more with many
// tenants): past kMetricsLogBytes it becomes metrics.1.jsonl (the one before goes) and a new one
// starts, so the two hold at most about twice that.
void AppendMetricsLine(const std::string& state_dir, const std::string& line) {
  const std::string path = state_dir + "/" + kMetricsLog;
  auto rotated = RotateIfLarger(path, state_dir + "/" + kOlderMetricsLog, kMetricsLogBytes);
  if (!rotated.ok()) std::fprintf(stderr, "[serve] %s\n", rotated.status().message().c_str());
  pipeline::AppendLine(path, line);
}

}  // namespace

Result<RunJobsReport> RunJobs(const RunJobsOptions& o) {
  // Before the stages start: they inherit the ignored SIGHUP (a closed terminal stops none of
  // them, not only serve), and Ctrl-C during the start stops the run cleanly.
  pipeline::InstallStopHandlers(/*stop_with_parent=*/false);
  MARLAAS_ASSIGN_OR_RETURN(std::unique_ptr<serve::Service> service,
                           serve::Service::Start(o.service));
  RunJobsReport report;
  // With the control socket, every tenant a job admits gets a token of its own, as a submitted
  // one does (tenants/<id>/token, for the user of that tenant alone); a resumed one keeps its own.
  std::optional<serve::Tokens> tokens;
  if (o.control_socket) {
    MARLAAS_ASSIGN_OR_RETURN(serve::Tokens t, serve::Tokens::Open(o.service.stage.state_dir));
    tokens.emplace(std::move(t));
  }
  auto give_token = [&](const std::string& tenant) {
    const std::string file = pipeline::TenantDir(o.service.stage.state_dir, tenant) + "/token";
    if (!tokens || std::filesystem::exists(file)) return;
    if (auto t = tokens->Issue(tenant); !t.ok())
      std::fprintf(stderr, "tenant %s has no token of its own (the admin token reaches it): %s\n",
                   tenant.c_str(), t.status().message().c_str());
  };
  std::vector<std::string> resumed;
  if (o.resume) {
    MARLAAS_ASSIGN_OR_RETURN(resumed, service->ResumeTenants());
  }
  // Every job is checked before any is admitted: one refused (invalid, an id the state dir
  // holds, an unreadable dataset) is an error naming it, wherever it is in the list.
  std::vector<pb::JobSpec> to_admit;
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
    MARLAAS_RETURN_IF_ERROR(
        service->Check(job).status().Annotate("admitting tenant '" + job.tenant() + "'"));
    to_admit.push_back(job);
  }
  // Admitted in order. Jobs the service has no room for yet (every row taken, or the memory
  // budget) wait, and are tried again when a tenant settles.
  std::vector<pb::JobSpec> waiting;
  for (const pb::JobSpec& job : to_admit) {
    Status st = waiting.empty() ? service->Admit(job)
                                : Status(StatusCode::kResourceExhausted, "jobs before it wait");
    if (st.code() == StatusCode::kResourceExhausted) {
      std::fprintf(stderr, "tenant %s waits for room: %s\n", job.tenant().c_str(),
                   st.message().c_str());
      waiting.push_back(job);
      continue;
    }
    if (!st.ok()) return st.Annotate("admitting tenant '" + job.tenant() + "'");
    give_token(job.tenant());
  }
  // Tries the waiting jobs, in order, once a tenant has settled since the last try (or nothing
  // runs). One that no longer passes its checks (its dataset gone, its id taken by a submit), or
  // that does not fit into an idle service, is refused: named, and the others go on.
  uint64_t settled_seen = service->settled();
  auto admit_waiting = [&] {
    if (waiting.empty() || (service->settled() == settled_seen && !service->AllDone())) return;
    settled_seen = service->settled();
    while (!waiting.empty()) {
      const bool idle = service->AllDone();
      const pb::JobSpec& job = waiting.front();
      Status st = service->Admit(job);
      if (st.code() == StatusCode::kResourceExhausted && !idle) return;
      if (st.ok()) {
        give_token(job.tenant());
        if (!o.quiet) std::printf("tenant %s admitted\n", job.tenant().c_str());
      } else {
        std::fprintf(stderr, "tenant %s refused: %s\n", job.tenant().c_str(), st.message().c_str());
        report.refused.push_back(job.tenant());
      }
      waiting.erase(waiting.begin());
    }
  };
  admit_waiting();
  // Said when the run ends early: waiting jobs were never admitted, so nothing of them resumes.
  auto never_admitted = [&] {
    if (waiting.empty()) return;
    std::fprintf(stderr, "never admitted (no room before the run ended), give them again:");
    for (const pb::JobSpec& job : waiting) std::fprintf(stderr, " %s", job.tenant().c_str());
    std::fprintf(stderr, "\n");
  };
  std::optional<serve::ControlServer> control;
  std::optional<serve::ControlHandler> handler;
  if (o.control_socket) {
    const std::string& dir = o.service.stage.state_dir;
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
  double next_print = o.print_every_s;
  while (o.until_stopped || !service->AllDone() || !waiting.empty()) {
    admit_waiting();
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
      if (o.metrics_jsonl)
        AppendMetricsLine(o.service.stage.state_dir, serve::MetricsJsonLine(*service, monitor));
      if (!o.quiet) std::printf("\n%s", monitor.Table(*service).c_str());
      std::fflush(stdout);
    }
  }
  monitor.Sample(*service);
  // The final state too: a run shorter than print_every_s (or ended by a signal) still leaves a
  // line naming every tenant.
  if (o.metrics_jsonl)
    AppendMetricsLine(o.service.stage.state_dir, serve::MetricsJsonLine(*service, monitor));
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

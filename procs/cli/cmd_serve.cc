// `marlaas serve [--job FILE ...]`: starts the service (rollout, verifier and trainer processes)
// with its control socket in the state dir, admits the jobs, shows the live table, and returns
// when every tenant is done — or, started without jobs, when interrupted (tenants then come by
// `marlaas submit`).
#include <unistd.h>

#include <cstdio>
#include <string>

#include "procs/cli/base_model.h"
#include "procs/cli/cli.h"
#include "procs/cli/run_jobs.h"
#include "proto/job_spec.h"

namespace marlaas::cli {

int RunServe(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  RunJobsOptions o;
  std::string job, threads = "1", workers = "2", timeout = "3600";
  while (TakeFlag(&args, "--job", &job)) {
    auto spec = LoadJobSpecFile(job);
    if (!spec.ok()) {
      std::fprintf(stderr, "marlaas serve: %s: %s\n", job.c_str(), spec.status().message().c_str());
      return 2;
    }
    o.jobs.push_back(*spec);
  }
  o.service.stage.state_dir = DefaultStateDir();
  o.service.stage.instance = "serve" + std::to_string(getpid());
  TakeFlag(&args, "--state-dir", &o.service.stage.state_dir);
  TakeFlag(&args, "--model-dir", &o.service.stage.model_dir);
  TakeFlag(&args, "--instance", &o.service.stage.instance);
  TakeFlag(&args, "--threads", &threads);
  TakeFlag(&args, "--verifier-workers", &workers);
  TakeFlag(&args, "--timeout-s", &timeout);
  std::string metrics_port, budget_mb, max_tenants;
  TakeFlag(&args, "--metrics-port", &metrics_port);
  TakeFlag(&args, "--memory-budget-mb", &budget_mb);
  TakeFlag(&args, "--max-tenants", &max_tenants);
  o.service.stage.allow_weak_sandbox = TakeSwitch(&args, "--allow-weak-sandbox");
  o.quiet = TakeSwitch(&args, "--quiet");
  if (int rc = RejectRest("serve", args)) return rc;
  // With jobs: until they are done; without: until SIGINT/SIGTERM, taking tenants by `submit`.
  o.control_socket = true;
  o.resume = true;  // a restart on the same state dir picks up every unfinished tenant
  o.metrics_jsonl = true;
  if (!budget_mb.empty())
    o.service.memory_budget_bytes = uint64_t(std::atoll(budget_mb.c_str())) << 20;
  if (!max_tenants.empty()) o.service.max_tenants = std::max(1, std::atoi(max_tenants.c_str()));
  if (!metrics_port.empty()) o.metrics_port = std::atoi(metrics_port.c_str());
  o.until_stopped = o.jobs.empty();
  o.service.stage.threads = std::max(1, std::atoi(threads.c_str()));
  o.service.stage.verifier_workers = std::max(1, std::atoi(workers.c_str()));
  o.timeout_s = std::atof(timeout.c_str());
  if (o.service.stage.model_dir.empty()) {
    auto dir = EnsureTinyBase(o.service.stage.state_dir, nullptr, nullptr);
    if (!dir.ok()) {
      std::fprintf(stderr, "marlaas serve: %s\n", dir.status().ToString().c_str());
      return 1;
    }
    o.service.stage.model_dir = *dir;
  }
  auto report = RunJobs(o);
  if (!report.ok()) {
    std::fprintf(stderr, "marlaas serve: %s\n", report.status().ToString().c_str());
    return 1;
  }
  return report->timed_out ? 1 : 0;
}

}  // namespace marlaas::cli

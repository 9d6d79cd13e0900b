// `marlaas serve [--job FILE ...]`: starts the service (rollout, verifier and trainer processes)
// with its control socket in the state dir, admits the jobs, shows the live table, and returns
// when every tenant is done — or, started without jobs, when interrupted (tenants then come by
// `marlaas submit`).
#include <google/protobuf/util/message_differencer.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "base/device_name.h"
#include "base/file_util.h"
#include "procs/cli/base_model.h"
#include "procs/cli/cli.h"
#include "procs/cli/run_jobs.h"
#include "procs/common/pipeline.h"
#include "procs/serve/admission.h"
#include "proto/job_spec.h"
#include "shm/tenant_table.h"

namespace marlaas::cli {

int RunServe(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  RunJobsOptions o;
  std::string job;
  std::map<std::string, std::string> file_of;  // tenant id -> the job file that names it
  while (TakeFlag(&args, "--job", &job)) {
    auto spec = LoadUserJobSpec(job);
    if (!spec.ok()) {
      std::fprintf(stderr, "marlaas serve: %s\n", spec.status().message().c_str());
      return 2;
    }
    if (auto [at, added] = file_of.emplace(spec->tenant(), job); !added) {
      std::fprintf(stderr,
                   "marlaas serve: %s and %s both name tenant '%s' (a tenant id is used once)\n",
                   at->second.c_str(), job.c_str(), spec->tenant().c_str());
      return 2;
    }
    o.jobs.push_back(*spec);
  }
  o.service.stage.state_dir = DefaultStateDir();
  o.service.stage.instance = "serve" + std::to_string(getpid());
  TakeFlag(&args, "--state-dir", &o.service.stage.state_dir);
  TakeFlag(&args, "--model-dir", &o.service.stage.model_dir);
  if (!TakeInstance(&args, "serve", &o.service.stage.instance)) return 2;
  TakeFlag(&args, "--device", &o.service.stage.device);
  // A device the stages would refuse (a typo, or "cuda" with a CPU-only LibTorch) is refused
  // here, before they start: not after their restarts.
  if (Status st = CheckDevice(o.service.stage.device); !st.ok()) {
    std::fprintf(stderr, "marlaas serve: %s\n", st.message().c_str());
    return 2;
  }
  long long threads = 1, workers = 2, port = -1, budget_mb = -1, max_tenants = 64, replicas = 1;
  double timeout_s = 0;  // none: serve runs until its jobs are done or it is stopped
  double stall_s = double(o.service.stall_timeout_ms) / 1000;
  const bool numbers_ok =
      TakeInteger(&args, "serve", "--threads", 1, 256, &threads) &&
      TakeInteger(&args, "serve", "--verifier-workers", 1, 256, &workers) &&
      TakeNumber(&args, "serve", "--timeout-s", 0, 1e9, &timeout_s) &&
      TakeNumber(&args, "serve", "--stall-timeout-s", 0, 1e6, &stall_s) &&
      TakeInteger(&args, "serve", "--metrics-port", 0, 65535, &port) &&
      TakeInteger(&args, "serve", "--memory-budget-mb", 0, 1LL << 30, &budget_mb) &&
      TakeInteger(&args, "serve", "--max-tenants", 1, kMaxTenants, &max_tenants) &&
      TakeInteger(&args, "serve", "--rollout-replicas", 1, pipeline::kMaxRolloutReplicas,
                  &replicas);
  if (!numbers_ok) return 2;
  o.service.stage.allow_weak_sandbox = TakeSwitch(&args, "--allow-weak-sandbox");
  o.quiet = TakeSwitch(&args, "--quiet");
  if (int rc = RejectRest("serve", args)) return rc;
  // With jobs: until they are done; without: until SIGINT/SIGTERM, taking tenants by `submit`.
  o.control_socket = true;
  o.resume = true;  // a restart on the same state dir picks up every unfinished tenant
  o.metrics_jsonl = true;
  o.service.max_tenants = int(max_tenants);
  o.metrics_port = int(port);
  o.until_stopped = o.jobs.empty();
  o.service.stage.threads = int(threads);
  o.service.stage.verifier_workers = int(workers);
  o.service.stage.rollout_replicas = int(replicas);
  o.timeout_s = timeout_s;
  if (stall_s > 0 && stall_s < 10) {
    std::fprintf(stderr,
                 "marlaas serve: --stall-timeout-s %g is too short: at least 10 (0 turns the "
                 "watchdog off)\n",
                 stall_s);
    return 2;
  }
  o.service.stall_timeout_ms = int64_t(stall_s * 1000);
  // A job naming an unfinished tenant of the state dir resumes it, as its job.json says: a job
  // file that says otherwise (edited since) would be ignored without a word, so it is refused.
  for (const pb::JobSpec& given : o.jobs) {
    const std::string dir = pipeline::TenantDir(o.service.stage.state_dir, given.tenant());
    if (!FileExists(dir + "/job.json") || FileExists(dir + "/state")) continue;
    auto stored = pipeline::LoadTenantJob(o.service.stage.state_dir, given.tenant());
    if (!stored.ok()) {
      std::fprintf(stderr, "marlaas serve: tenant '%s' of %s: %s\n", given.tenant().c_str(),
                   o.service.stage.state_dir.c_str(), stored.status().message().c_str());
      return 2;
    }
    pb::JobSpec a = given;
    ApplyJobSpecDefaults(&a);
    ApplyJobSpecDefaults(&*stored);
    if (google::protobuf::util::MessageDifferencer::Equals(a, *stored)) continue;
    std::fprintf(stderr,
                 "marlaas serve: %s names tenant '%s', which %s holds unfinished with another job "
                 "(%s/job.json): give the same job to resume it, or the new one another id\n",
                 file_of[given.tenant()].c_str(), given.tenant().c_str(),
                 o.service.stage.state_dir.c_str(), dir.c_str());
    return 2;
  }
  if (o.service.stage.model_dir.empty()) {
    auto dir = EnsureTinyBase(o.service.stage.state_dir, nullptr, nullptr);
    if (!dir.ok()) {
      std::fprintf(stderr, "marlaas serve: %s\n", dir.status().message().c_str());
      return 1;
    }
    o.service.stage.model_dir = *dir;
  }
  // Likewise a base model they could not load.
  if (Status st = CheckBaseModel(o.service.stage.model_dir); !st.ok()) {
    std::fprintf(stderr, "marlaas serve: the base model: %s\n", st.message().c_str());
    return 2;
  }
  // Without --memory-budget-mb, on the CPU: what this host can hold (on a GPU: none).
  if (budget_mb >= 0) {
    o.service.memory_budget_bytes = uint64_t(budget_mb) << 20;
    o.service.memory_budget_source = budget_mb > 0 ? "--memory-budget-mb" : "";
  } else if (*ParseDeviceName(o.service.stage.device) < 0) {  // the CPU (device checked above)
    const serve::MemoryBudget b =
        serve::DefaultMemoryBudget(o.service.stage.model_dir, 1 + int(replicas));
    o.service.memory_budget_bytes = b.bytes;
    o.service.memory_budget_source = b.source;
  }
  auto report = RunJobs(o);
  if (!report.ok()) {
    std::fprintf(stderr, "marlaas serve: %s\n", report.status().message().c_str());
    return report.status().code() == StatusCode::kCancelled ? 130 : 1;
  }
  if (report->timed_out) return 1;
  if (report->interrupted) return 130;  // Ctrl-C or SIGTERM: stopped cleanly, as asked
  // With jobs, success is every one of them finished; one that failed (its reason is in the
  // table above and in `marlaas status`) makes the exit status 1. Without jobs, serve ran until
  // stopped, and a tenant's failure is that tenant's.
  int failed = 0;
  for (const serve::TenantView& t : report->tenants) {
    if (t.record.state != TenantState::kFailed || !file_of.count(t.record.id)) continue;
    if (failed++ == 0) std::fprintf(stderr, "marlaas serve: failed tenants:");
    std::fprintf(stderr, " %s", t.record.id);
  }
  for (const std::string& id : report->refused) {  // waited for room, then refused
    if (failed++ == 0) std::fprintf(stderr, "marlaas serve: failed tenants:");
    std::fprintf(stderr, " %s (refused)", id.c_str());
  }
  if (failed > 0)
    std::fprintf(stderr, " (reasons: marlaas status --state-dir %s)\n",
                 o.service.stage.state_dir.c_str());
  return failed > 0 ? 1 : 0;
}

}  // namespace marlaas::cli

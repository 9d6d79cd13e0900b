// The control commands, each one request to a running `marlaas serve` over its control socket:
//   marlaas submit JOB.json        prints "tenant: ID" and "token: TOKEN"
//   marlaas status [TENANT] [--json]
//   marlaas stop TENANT
//   marlaas export TENANT --out DIR
//   marlaas logs TENANT [--lines N]
// Every one takes --state-dir DIR (where the socket is) and all but submit --token TOKEN
// (default: the admin token when readable; an empty value is refused). Exit codes: 0 done, 1
// refused or failed (the reason on stderr), 2 usage.

#include <cstdio>
#include <cstdlib>
#include <tuple>

#include "procs/cli/base_model.h"
#include "procs/cli/cli.h"
#include "procs/cli/control_client.h"
#include "proto/job_spec.h"

namespace marlaas::cli {
namespace {

struct Common {
  std::string state_dir, token;
};

// --state-dir, and --token where the command takes one (submit does not: the service admits
// any job sent on its socket, whose file mode is the guard). An empty value is not taken
// (TakeFlag): it stays for the command's RejectOptions, which names it (an empty --token used to
// stand for the admin token).
void TakeCommon(std::vector<std::string>* args, bool with_token, Common* c) {
  c->state_dir = DefaultStateDir();
  std::string token;
  TakeFlag(args, "--state-dir", &c->state_dir);
  if (with_token) TakeFlag(args, "--token", &token);
  c->token = with_token ? ResolveToken(c->state_dir, token) : "";
}

// Sends the request; prints the error and returns nullopt when it failed or was refused.
std::optional<pb::ControlReply> Call(const char* command, const Common& c, pb::ControlRequest req) {
  req.set_token(c.token);
  auto reply = CallService(c.state_dir, std::move(req));
  if (!reply.ok()) {
    std::fprintf(stderr, "marlaas %s: %s\n", command, reply.status().message().c_str());
    return std::nullopt;
  }
  if (!reply->ok()) {
    std::fprintf(stderr, "marlaas %s: %s\n", command, reply->error().c_str());
    return std::nullopt;
  }
  return *reply;
}

int Usage(const char* text) {
  std::fprintf(stderr, "usage: %s\n", text);
  return 2;
}

}  // namespace

int RunSubmit(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  Common c;
  TakeCommon(&args, false, &c);
  if (int rc = RejectOptions("submit", args)) return rc;
  if (args.size() != 1) return Usage("marlaas submit JOB.json [--state-dir DIR]");
  auto job = LoadUserJobSpec(args[0]);
  if (!job.ok()) {
    std::fprintf(stderr, "marlaas submit: %s\n", job.status().message().c_str());  // names it
    return 1;
  }
  pb::ControlRequest req;
  *req.mutable_submit()->mutable_job() = *job;
  auto reply = Call("submit", c, std::move(req));
  if (!reply) return 1;
  std::printf("tenant: %s\ntoken: %s\n", reply->submit().tenant().c_str(),
              reply->submit().token().c_str());
  return 0;
}

int RunStatus(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  Common c;
  TakeCommon(&args, true, &c);
  const bool as_json = TakeSwitch(&args, "--json");
  if (int rc = RejectOptions("status", args)) return rc;
  if (args.size() > 1)
    return Usage("marlaas status [TENANT] [--json] [--state-dir DIR] [--token T]");
  pb::ControlRequest req;
  req.mutable_status()->set_tenant(args.empty() ? "" : args[0]);
  auto reply = Call("status", c, std::move(req));
  if (!reply) return 1;
  if (as_json) {
    std::printf("%s\n", StatusReplyJson(reply->status()).c_str());
    return 0;
  }
  std::printf("%-20s %-17s %-9s %6s %7s %5s  %s\n", "tenant", "task", "state", "step", "reward",
              "stale", "reason");
  for (const pb::TenantStatus& t : reply->status().tenants()) {
    // A reason of several lines (a verifier's stderr) goes on under its column.
    std::string reason;
    for (char ch : t.reason())
      reason += ch == '\n' ? "\n" + std::string(71, ' ') : std::string(1, ch);
    std::printf("%-20s %-17s %-9s %6llu %7.3f %5u  %s\n", t.id().c_str(), t.task().c_str(),
                t.state().c_str(), (unsigned long long)t.step(), t.reward_mean(), t.staleness(),
                reason.c_str());
  }
  return 0;
}

int RunStop(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  Common c;
  TakeCommon(&args, true, &c);
  if (int rc = RejectOptions("stop", args)) return rc;
  if (args.size() != 1) return Usage("marlaas stop TENANT [--state-dir DIR] [--token T]");
  pb::ControlRequest req;
  req.mutable_stop()->set_tenant(args[0]);
  if (!Call("stop", c, std::move(req))) return 1;
  std::printf("stopped %s\n", args[0].c_str());
  return 0;
}

int RunExport(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  Common c;
  TakeCommon(&args, true, &c);
  std::string out;
  TakeFlag(&args, "--out", &out);
  if (int rc = RejectOptions("export", args)) return rc;
  if (args.size() != 1 || out.empty())
    return Usage("marlaas export TENANT --out DIR [--state-dir DIR] [--token T]");
  char* abs = ::realpath(".", nullptr);  // the service resolves paths from its own directory
  const std::string dir = out[0] == '/' ? out : std::string(abs ? abs : ".") + "/" + out;
  std::free(abs);
  pb::ControlRequest req;
  req.mutable_export_()->set_tenant(args[0]);
  req.mutable_export_()->set_out_dir(dir);
  if (!Call("export", c, std::move(req))) return 1;
  std::printf("exported %s to %s (PEFT layout)\n", args[0].c_str(), dir.c_str());
  return 0;
}

int RunLogs(const std::vector<std::string>& argv) {
  std::vector<std::string> args = argv;
  Common c;
  TakeCommon(&args, true, &c);
  long long lines = 100;
  if (!TakeInteger(&args, "logs", "--lines", 1, 10000, &lines)) return 2;
  if (int rc = RejectOptions("logs", args)) return rc;
  if (args.size() != 1)
    return Usage("marlaas logs TENANT [--lines N] [--state-dir DIR] [--token T]");
  pb::ControlRequest req;
  req.mutable_logs()->set_tenant(args[0]);
  req.mutable_logs()->set_max_lines(uint32_t(lines));
  auto reply = Call("logs", c, std::move(req));
  if (!reply) return 1;
  for (const std::string& l : reply->logs().lines()) std::printf("%s\n", l.c_str());
  return 0;
}

}  // namespace marlaas::cli

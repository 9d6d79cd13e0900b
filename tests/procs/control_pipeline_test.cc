// The service face over the control socket with the real pipeline behind it: tenants submitted,
// watched, stopped and exported while others train, each command checked against tokens.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "base/file_util.h"
#include "model/base_weights.h"
#include "model/lora_adapter.h"
#include "procs/cli/cli.h"
#include "procs/cli/control_client.h"
#include "procs/serve/admission.h"
#include "procs/serve/control_handler.h"
#include "procs/serve/control_server.h"
#include "procs/serve/metrics_export.h"
#include "procs/serve/tokens.h"
#include "proto/job_spec.h"
#include "shm/stale_segments.h"
#include "tests/procs/pipeline_fixture.h"
#include "tests/procs/run_marlaas.h"
#include "tests/test_util.h"

namespace marlaas::testing {
namespace {

namespace fs = std::filesystem;

// One control call from a client: the reply, or an error reply carrying the transport failure.
pb::ControlReply Call(const std::string& dir, const std::string& token, pb::ControlRequest r) {
  r.set_token(token);
  auto reply = cli::CallService(dir, std::move(r), 20000);
  if (reply.ok()) return *reply;
  pb::ControlReply failed;
  failed.set_error("transport: " + reply.status().ToString());
  return failed;
}

pb::ControlRequest Submit(const pb::JobSpec& job) {
  pb::ControlRequest r;
  *r.mutable_submit()->mutable_job() = job;
  return r;
}
pb::ControlRequest StatusOf(const std::string& tenant) {
  pb::ControlRequest r;
  r.mutable_status()->set_tenant(tenant);
  return r;
}
pb::ControlRequest Stop(const std::string& tenant) {
  pb::ControlRequest r;
  r.mutable_stop()->set_tenant(tenant);
  return r;
}
pb::ControlRequest Export(const std::string& tenant, const std::string& out) {
  pb::ControlRequest r;
  r.mutable_export_()->set_tenant(tenant);
  r.mutable_export_()->set_out_dir(out);
  return r;
}
pb::ControlRequest Logs(const std::string& tenant) {
  pb::ControlRequest r;
  r.mutable_logs()->set_tenant(tenant);
  return r;
}

// GET /metrics from 127.0.0.1:port; the whole response.
std::string Scrape(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const timeval limit{20, 0};  // a server that stopped serving fails the scrape, not hangs it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    (void)!::send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL);
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;) out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

TEST_F(PipelineTest, SubmitStatusStopAndExportOverTheControlSocketWhileOthersTrain) {
  StartService();
  auto tokens = serve::Tokens::Open(state_dir_);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  auto server = serve::ControlServer::Listen(state_dir_ + "/control.sock");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  serve::ControlHandler handler(service_.get(), &*tokens);
  auto http = serve::MetricsHttp::Listen(0);
  ASSERT_TRUE(http.ok()) << http.status().ToString();
  serve::Monitor monitor;
  std::string scraped;

  const testing::ScopedTempDir outs("exported");  // outside the state dir, where exports go
  const std::string dir = state_dir_, export_dir = outs.path() + "/exported";
  std::atomic<bool> done{false};
  std::vector<std::string> failures;  // written by the client thread, read after join
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  };
  // Once the test gave up waiting (`done` set by it), the client calls nothing more, so that the
  // join is bounded by the one call in flight.
  auto call = [&](const std::string& token, pb::ControlRequest r) {
    if (done) {
      pb::ControlReply gave_up;
      gave_up.set_error("the test gave up waiting");
      return gave_up;
    }
    return Call(dir, token, std::move(r));
  };
  std::thread client([&] {
    pb::JobSpec a = SmallJob("alpha", "countdown", 12, 31),
                b = SmallJob("beta", "arithmetic", 400, 32);
    const pb::ControlReply ra = call("", Submit(a)), rb = call("", Submit(b));
    expect(ra.ok() && ra.submit().token().size() == 32, "submit alpha: " + ra.error());
    expect(rb.ok(), "submit beta: " + rb.error());
    const std::string ta = ra.submit().token(), tb = rb.submit().token();
    const pb::ControlReply again = call("", Submit(a));
    expect(!again.ok() && again.error().find("already") != std::string::npos,
           "a second alpha was admitted: " + again.error());
    pb::JobSpec bad = a;
    bad.set_tenant("gamma");
    bad.set_group_size(0);
    const pb::ControlReply rbad = call("", Submit(bad));
    expect(!rbad.ok() && rbad.error().find("group_size") != std::string::npos,
           "an invalid spec was admitted or not named: " + rbad.error());
    // Alpha trains while beta does.
    for (int i = 0; i < 300 && !done; ++i) {
      const pb::ControlReply s = call(ta, StatusOf("alpha"));
      if (s.ok() && s.status().tenants(0).step() >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    // Tokens: each sees only its own tenant; the other's commands are refused.
    const pb::ControlReply mine = call(ta, pb::ControlRequest(StatusOf("")));
    expect(
        mine.ok() && mine.status().tenants_size() == 1 && mine.status().tenants(0).id() == "alpha",
        "alpha's token does not see exactly alpha");
    expect(!call(ta, StatusOf("beta")).ok(), "alpha's token saw beta");
    expect(!call(ta, Stop("beta")).ok(), "alpha's token stopped beta");
    expect(!call(ta, Logs("beta")).ok(), "alpha's token read beta's logs");
    expect(!call(ta, Export("beta", export_dir + "-beta")).ok(), "alpha's token exported beta");
    expect(!call("", StatusOf("alpha")).ok(), "no token saw alpha");
    const pb::ControlReply stranger = call("deadbeef", StatusOf(""));  // not an empty table
    expect(!stranger.ok() && stranger.error().find("neither the admin token nor any tenant's") !=
                                 std::string::npos,
           "a foreign token's status: " + stranger.error());
    const pb::ControlReply all = call(tokens->admin(), StatusOf(""));
    expect(all.ok() && all.status().tenants_size() == 2, "the admin does not see both");
    // Beta is stopped by its owner while alpha goes on.
    const pb::ControlReply stopped = call(tb, Stop("beta"));
    expect(stopped.ok(), "stop beta: " + stopped.error());
    const pb::ControlReply sb = call(tb, StatusOf("beta"));
    expect(sb.ok() && sb.status().tenants(0).state() == "stopped", "beta is not stopped");
    // Submitted again, a stopped tenant is not "already admitted": its id is taken.
    const pb::ControlReply rebeta = call("", Submit(b));
    expect(!rebeta.ok() &&
               rebeta.error().find("'beta' already exists in this state dir "
                                   "(stopped): give the job another id") != std::string::npos,
           "beta submitted again: " + rebeta.error());
    for (int i = 0; i < 600 && !done; ++i) {
      const pb::ControlReply s = call(ta, StatusOf("alpha"));
      if (s.ok() && s.status().tenants(0).state() == "finished") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (!done) scraped = Scrape(http->port());
    const pb::ControlReply odd = call(tokens->admin(), Logs("../alpha"));
    expect(!odd.ok() && odd.error() ==
                            "'../alpha' is not a tenant id (1-63 characters of a-z, "
                            "0-9, _ and -)",
           "a malformed id: " + odd.error());
    const pb::ControlReply logs = call(ta, Logs("alpha"));
    expect(logs.ok() && logs.logs().lines_size() > 0, "alpha's logs are empty: " + logs.error());
    const pb::ControlReply ex = call(ta, Export("alpha", export_dir));
    expect(ex.ok(), "export alpha: " + ex.error());
    done = true;
  });
  const bool finished =
      RunUntil([&] { return done.load(); }, 240,
               [&] {
                 server->Poll(0, [&](const pb::ControlRequest& r) { return handler.Handle(r); });
                 monitor.Sample(*service_);
                 http->Serve([&] { return serve::PrometheusText(*service_, monitor); });
               });
  if (!finished) done = true;
  client.join();
  ASSERT_TRUE(finished) << "the client scenario did not finish";
  for (const std::string& f : failures) ADD_FAILURE() << f;
  // The Prometheus scrape names both tenants and the engines.
  EXPECT_NE(scraped.find("HTTP/1.0 200 OK"), std::string::npos) << scraped;
  EXPECT_NE(scraped.find("marlaas_tenant_step{tenant=\"alpha\",task=\"countdown\""),
            std::string::npos)
      << scraped;
  EXPECT_NE(scraped.find("marlaas_tenant_reward_mean{tenant=\"beta\""), std::string::npos);
  EXPECT_NE(scraped.find("marlaas_engine_utilization{engine=\"trainer\"}"), std::string::npos);
  EXPECT_NE(scraped.find("marlaas_queue_depth_groups{ring=\"traj\"}"), std::string::npos);

  // Alpha finished all its steps although beta was stopped mid-run.
  bool alpha_finished = false;
  for (const serve::TenantView& v : service_->Tenants()) {
    if (std::string(v.record.id) == "alpha")
      alpha_finished = v.record.state == TenantState::kFinished;
    if (std::string(v.record.id) == "beta") {
      EXPECT_EQ(v.record.state, TenantState::kStopped);
      EXPECT_LT(v.trainer.steps, 400u);
      // Its status.json (what `status` says once its row is reused or serve restarts) has the
      // step the trainer ended at, also when a step was under way at the stop; its reason too.
      service_->Tick();
      const auto saved = nlohmann::json::parse(ReadAll(TenantDir("beta") + "/status.json"));
      EXPECT_EQ(saved["step"].get<uint64_t>(), v.trainer.steps) << saved;
      EXPECT_EQ(saved["reason"], "stopped by its owner") << saved;
    }
  }
  EXPECT_TRUE(alpha_finished);
  // The export re-imports to the very weights of alpha's latest checkpoint.
  auto base = model::BaseWeights::Load(TestBaseModel());
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  std::string latest = ReadAll(TenantDir("alpha") + "/checkpoints/LATEST");
  latest = latest.substr(0, latest.find('\n'));
  auto exported = model::LoraAdapter::ImportPeft(export_dir, **base);
  auto original =
      model::LoraAdapter::ImportPeft(TenantDir("alpha") + "/checkpoints/" + latest, **base);
  ASSERT_TRUE(exported.ok()) << exported.status().ToString();
  ASSERT_TRUE(original.ok()) << original.status().ToString();
  EXPECT_TRUE(torch::equal(exported->flat(), original->flat()));
}

// Many clients submit at once: every distinct tenant is admitted once with its own token, and of
// the clients racing for one id exactly one wins.
TEST_F(PipelineTest, ConcurrentSubmitsFromManyClients) {
  StartService();
  auto tokens = serve::Tokens::Open(state_dir_);
  ASSERT_TRUE(tokens.ok());
  auto server = serve::ControlServer::Listen(state_dir_ + "/control.sock");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  serve::ControlHandler handler(service_.get(), &*tokens);
  constexpr int kClients = 8;
  std::vector<std::string> own_tokens(kClients);
  std::atomic<int> own_ok{0}, dup_ok{0}, finished{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      const pb::ControlReply own =
          Call(state_dir_, "", Submit(SmallJob("c" + std::to_string(i), "countdown", 3, i)));
      if (own.ok()) {
        ++own_ok;
        own_tokens[size_t(i)] = own.submit().token();
      }
      if (Call(state_dir_, "", Submit(SmallJob("dup", "countdown", 3, 99))).ok()) ++dup_ok;
      ++finished;
    });
  }
  const bool all = RunUntil(
      [&] { return finished.load() == kClients; }, 60,
      [&] { server->Poll(0, [&](const pb::ControlRequest& r) { return handler.Handle(r); }); });
  for (auto& t : clients) t.join();
  ASSERT_TRUE(all) << "clients did not finish";
  EXPECT_EQ(own_ok.load(), kClients);
  EXPECT_EQ(dup_ok.load(), 1);
  std::set<std::string> distinct(own_tokens.begin(), own_tokens.end());
  EXPECT_EQ(distinct.size(), size_t(kClients));
  EXPECT_EQ(service_->Tenants().size(), size_t(kClients + 1));
}

// The admission estimate grows with the adapter exactly as the documented formula says, and the
// service refuses a tenant over its budget with the figures, until one is stopped.
TEST_F(PipelineTest, AdmissionRefusesTenantsOverTheMemoryBudget) {
  const pb::JobSpec a = SmallJob("one", "countdown", 5, 1);
  pb::JobSpec wide = a;
  wide.mutable_lora()->set_rank(a.lora().rank() * 2);
  const auto small = serve::EstimateTenantBytes(a, TestBaseModel());
  const auto large = serve::EstimateTenantBytes(wide, TestBaseModel());
  ASSERT_TRUE(small.ok() && large.ok()) << small.status().ToString();
  // Tiny base: 4 layers; per layer and unit of rank q 256, k 192, v 192, o 256, gate, up and
  // down 480 each (hidden 128, 2 KV heads of 32, intermediate 352): 2336 parameters.
  EXPECT_EQ(*large - *small, 28ull * 4 * 2336 * uint64_t(a.lora().rank()));

  memory_budget_bytes_ = *small * 5 / 2;  // room for two
  StartService();
  ASSERT_TRUE(service_->Admit(a).ok());
  pb::JobSpec b = a, c = a;
  b.set_tenant("two");
  c.set_tenant("three");
  ASSERT_TRUE(service_->Admit(b).ok());
  const Status refused = service_->Admit(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("memory budget"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("2 tenant(s)"), std::string::npos) << refused.ToString();
  EXPECT_FALSE(fs::exists(TenantDir("three") + "/job.json")) << "a refused tenant left state";
  ASSERT_TRUE(service_->StopTenant("two").ok());
  EXPECT_TRUE(service_->Admit(c).ok());
}

// Tenants come and go while another trains: with room for two at a time, a third is refused
// until one settles, then takes the settled tenant's row and adapter slot. The newcomer never
// decodes with its predecessor's adapter, and the predecessor stays in `status` from its
// status.json although its row went to the newcomer.
TEST_F(PipelineTest, ASettledTenantsRowAndAdapterSlotGoToTheNextTenant) {
  max_tenants_ = 2;
  StartService();
  auto tokens = serve::Tokens::Open(state_dir_);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  serve::ControlHandler handler(service_.get(), &*tokens);
  auto call = [&](const std::string& token, pb::ControlRequest r) {
    r.set_token(token);
    return handler.Handle(r);
  };
  auto row_of = [&](const std::string& id) {
    for (const serve::TenantView& v : service_->Tenants())
      if (id == v.record.id) return std::make_pair(v.row, v.record.generation);
    return std::make_pair(-1, uint64_t(0));
  };
  auto state_of = [&](const std::string& id) {
    const pb::ControlReply r = call(tokens->admin(), StatusOf(id));
    return r.ok() && r.status().tenants_size() == 1 ? r.status().tenants(0).state() : r.error();
  };
  ASSERT_TRUE(call("", Submit(SmallJob("long", "arithmetic", 400, 51))).ok());
  const pb::ControlReply first = call("", Submit(SmallJob("first", "countdown", 4, 52)));
  ASSERT_TRUE(first.ok()) << first.error();
  const auto [first_row, first_generation] = row_of("first");
  const pb::ControlReply full = call("", Submit(SmallJob("second", "countdown", 4, 53)));
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.error().find("at most 2 tenants at a time"), std::string::npos) << full.error();
  EXPECT_FALSE(fs::exists(TenantDir("second") + "/job.json")) << "a refused tenant left state";

  ASSERT_TRUE(RunUntil([&] { return state_of("first") == "finished"; }, 120))
      << "first: " << state_of("first");
  const pb::ControlReply admitted = call("", Submit(SmallJob("second", "countdown", 4, 53)));
  ASSERT_TRUE(admitted.ok()) << admitted.error();
  const auto [second_row, second_generation] = row_of("second");
  EXPECT_EQ(second_row, first_row) << "the settled tenant's row was not reused";
  EXPECT_EQ(second_generation, first_generation + 1);
  ASSERT_TRUE(RunUntil([&] { return state_of("second") == "finished"; }, 120))
      << "second: " << state_of("second");
  EXPECT_EQ(state_of("long"), "running") << "the long tenant stopped training meanwhile";
  ASSERT_TRUE(call(tokens->admin(), Stop("long")).ok());
  // `first`, settled and rowless, cannot be stopped again, and says why; an unknown tenant's
  // logs are refused as status refuses it (they were an empty reply).
  const pb::ControlReply again = call(tokens->admin(), Stop("first"));
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.error().find("tenant 'first' is already finished"), std::string::npos)
      << again.error();
  const pb::ControlReply nobody = call(tokens->admin(), Logs("nosuch"));
  EXPECT_FALSE(nobody.ok());
  EXPECT_NE(nobody.error().find("no tenant 'nosuch'"), std::string::npos) << nobody.error();

  // Every step of `second` trained groups sampled by its own adapter versions, which never run
  // ahead of its trainer; `first` reached version 5, so its adapter would show up as newer.
  std::ifstream steps(TenantDir("second") + "/steps.jsonl");
  int n = 0;
  for (std::string line; std::getline(steps, line); ++n) {
    const auto j = nlohmann::json::parse(line);
    EXPECT_LE(j["behaviour_versions"][1].get<uint64_t>(), j["trained_at"].get<uint64_t>()) << line;
  }
  EXPECT_EQ(n, 4);
  EXPECT_EQ(ReadAll(TenantDir("second") + "/trainer.log").find("newer than"), std::string::npos);
  // The verifier's counters for `second` are its own (a late group of `first` did not reset them).
  for (const serve::TenantView& v : service_->Tenants()) {
    if (std::string(v.record.id) != "second") continue;
    EXPECT_GE(v.verifier.groups, v.trainer.groups);
    EXPECT_EQ(v.trainer.steps, 4u);
  }

  // `first` has no row any more, and is still reported, with its figures, to its owner.
  EXPECT_EQ(row_of("first").first, -1);
  const pb::ControlReply all = call(tokens->admin(), StatusOf(""));
  ASSERT_TRUE(all.ok()) << all.error();
  std::map<std::string, pb::TenantStatus> by_id;
  for (const pb::TenantStatus& t : all.status().tenants()) by_id[t.id()] = t;
  ASSERT_EQ(by_id.size(), 3u);
  EXPECT_EQ(by_id["first"].state(), "finished");
  EXPECT_EQ(by_id["first"].step(), 4u);
  EXPECT_EQ(by_id["first"].task(), "countdown");
  EXPECT_EQ(by_id["long"].state(), "stopped");
  EXPECT_EQ(by_id["second"].state(), "finished");
  const pb::ControlReply own = call(first.submit().token(), StatusOf(""));
  ASSERT_TRUE(own.ok()) << own.error();
  ASSERT_EQ(own.status().tenants_size(), 1);
  EXPECT_EQ(own.status().tenants(0).id(), "first");
  EXPECT_FALSE(call(first.submit().token(), StatusOf("second")).ok());
}

// `marlaas serve` on the test's state dir as a process of its own; returns its pid. It dies with
// the test process (its stages follow it).
pid_t StartServeProcess(const std::string& state_dir) {
  const std::string bin = std::string(MARLAAS_BIN_DIR) + "/marlaas",
                    log = state_dir + "/serve-" + std::to_string(::time(nullptr)) + ".log",
                    model = TestBaseModel();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(113);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execl(bin.c_str(), bin.c_str(), "serve", "--state-dir", state_dir.c_str(), "--model-dir",
            model.c_str(), "--quiet", nullptr);
    ::_exit(127);
  }
  return pid;
}

// Polls `status` of `tenant` until `ok(status)` or the timeout; the last status seen.
pb::TenantStatus WaitForStatus(const std::string& dir, const std::string& token,
                               const std::string& tenant,
                               const std::function<bool(const pb::TenantStatus&)>& ok,
                               double timeout_s) {
  pb::TenantStatus last;
  // A deadline, not a count of calls: a wedged serve makes each call wait out its own timeout.
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < until) {
    const pb::ControlReply r = Call(dir, token, StatusOf(tenant));
    if (r.ok() && r.status().tenants_size() == 1) {
      last = r.status().tenants(0);
      if (ok(last)) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return last;
}

// A process as /proc/<pid>/stat shows it: its parent, its state letter, its command name and
// its start time (clock ticks since boot: tells a reused pid from the process seen before).
struct ProcStat {
  pid_t ppid = 0;
  char state = 0;
  std::string comm;
  unsigned long long start = 0;
};
std::optional<ProcStat> ReadProcStat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  ProcStat st;
  st.comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 2));  // fields 3 on: state ppid ...
  std::vector<std::string> fields;
  for (std::string x; rest >> x;) fields.push_back(x);
  if (fields.size() < 20) return std::nullopt;
  st.state = fields[0][0];
  st.ppid = pid_t(std::stol(fields[1]));
  st.start = std::stoull(fields[19]);  // field 22 of stat
  return st;
}

// The stage processes serve `parent` has running: its children whose command is marlaas-*,
// each with its start time.
std::map<pid_t, unsigned long long> StagesOf(pid_t parent) {
  std::map<pid_t, unsigned long long> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = pid_t(std::stol(name));
    const auto st = ReadProcStat(pid);
    if (st && st->ppid == parent && st->comm.rfind("marlaas-", 0) == 0) out[pid] = st->start;
  }
  return out;
}

// True when the process `pid` that started at `start` has ended: the pid is gone (ESRCH), is a
// zombie nobody reaped yet (it was reparented) or now belongs to another process.
bool Ended(pid_t pid, unsigned long long start) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  const auto st = ReadProcStat(pid);
  return !st || st->state == 'Z' || st->start != start;
}

// serve --job stops at --timeout-s with the tenants unfinished, and says so (it used to stop
// silently, and after an hour by default even with no jobs); the tenant stays on disk to resume.
TEST_F(PipelineTest, ServeSaysWhenItStopsAtItsTimeLimit) {
  const std::string job = state_dir_ + "/long.json";
  fs::create_directories(state_dir_);
  std::ofstream(job) << JobSpecToJson(SmallJob("long", "arithmetic", 400, 7));
  const CommandResult r = RunMarlaas("serve --quiet --timeout-s 2 --state-dir " + state_dir_ +
                                     " --model-dir " + TestBaseModel() + " --job " + job);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("stopping after the time limit (2 s, --timeout-s): 1 tenant(s) not done"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(fs::exists(TenantDir("long") + "/job.json"));
  EXPECT_FALSE(fs::exists(TenantDir("long") + "/state"));
}

// serve without --memory-budget-mb admits against what the host can hold: a job far larger is
// refused at submit, with the figures and where the budget came from, and nothing is left of it;
// a small job beside it is admitted. A hangup (its terminal closed) does not stop serve; SIGTERM
// stops it with exit status 130.
TEST_F(PipelineTest, ServeRefusesAJobTheHostCannotHoldAtSubmit) {
  pid_t serve = StartServeProcess(state_dir_);
  const ScopeExit kill_serve([&serve] {
    if (serve > 0) KillChild(serve);
  });
  pb::JobSpec huge = SmallJob("huge", "countdown", 5, 1);
  huge.set_group_size(256);
  huge.set_prompts_per_step(1024);
  huge.mutable_sampling()->set_max_new_tokens(400);  // within the base's 512 positions
  pb::ControlReply r;
  for (int i = 0; i < 100; ++i) {  // the socket appears once serve is up
    r = Call(state_dir_, "", Submit(huge));
    if (r.ok() || r.error().find("transport") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(r.ok()) << "a job of terabytes was admitted";
  EXPECT_NE(r.error().find("tenant 'huge' needs about"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("budget: the default: this host's"), std::string::npos) << r.error();
  EXPECT_FALSE(fs::exists(TenantDir("huge") + "/job.json"));
  // A hangup reaches serve and its stages (a closed terminal's whole process group): none ends.
  const std::map<pid_t, unsigned long long> stages = StagesOf(serve);
  ASSERT_GE(stages.size(), 3u) << "serve's stage processes were not found under /proc";
  ASSERT_EQ(::kill(serve, SIGHUP), 0);
  for (const auto& [pid, start] : stages) ::kill(pid, SIGHUP);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (const auto& [pid, start] : stages) EXPECT_FALSE(Ended(pid, start)) << "stage " << pid;
  const pb::ControlReply small = Call(state_dir_, "", Submit(SmallJob("small", "countdown", 1, 2)));
  EXPECT_TRUE(small.ok()) << small.error() << " (after a SIGHUP)";
  ::kill(serve, SIGTERM);
  const ChildExit stopped = WaitChildFor(serve, 60);
  serve = -1;
  EXPECT_FALSE(stopped.timed_out) << "serve did not stop within 60 s of SIGTERM";
  EXPECT_TRUE(stopped.exited && stopped.code == 130) << stopped.code << " " << stopped.signal;
}

// kill -9 of serve mid-run: its stages follow it, and a new serve on the same state dir resumes
// every unfinished tenant from its last checkpoint, with its token, to the end.
TEST_F(PipelineTest, KillNineOfServeThenRestartResumesEveryTenant) {
  pid_t serve = StartServeProcess(state_dir_);
  // A failed ASSERT leaves no serve (nor its stages) running; -1 once it has been reaped.
  const ScopeExit kill_serve([&serve] {
    if (serve > 0) KillChild(serve);
  });
  const std::vector<std::string> ids = {"uno", "dos"};
  std::map<std::string, std::string> token;
  for (const std::string& id : ids) {
    pb::JobSpec j = SmallJob(id, "countdown", 30, id.size() + 40);
    j.set_checkpoint_every(3);
    pb::ControlReply r;
    for (int i = 0; i < 100; ++i) {  // the socket appears once serve is up
      r = Call(state_dir_, "", Submit(j));
      if (r.ok() || r.error().find("transport") == std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(r.ok()) << r.error();
    token[id] = r.submit().token();
  }
  // A short tenant settles before the kill; the restarted service (empty table) still reports it.
  const pb::ControlReply tres = Call(state_dir_, "", Submit(SmallJob("tres", "countdown", 3, 43)));
  ASSERT_TRUE(tres.ok()) << tres.error();
  std::map<std::string, std::vector<std::string>> lines_at_kill;
  const pb::TenantStatus settled = WaitForStatus(
      state_dir_, tres.submit().token(), "tres",
      [](const pb::TenantStatus& t) { return t.state() == "finished"; }, 120);
  ASSERT_EQ(settled.state(), "finished");
  for (const std::string& id : ids) {
    const pb::TenantStatus s = WaitForStatus(
        state_dir_, token[id], id, [](const pb::TenantStatus& t) { return t.step() >= 7; }, 120);
    ASSERT_GE(s.step(), 7u) << id << " did not train";
  }
  // The stages serve runs now (rollout, verifier, trainer at least): they must not outlive it.
  const std::map<pid_t, unsigned long long> stages = StagesOf(serve);
  ASSERT_GE(stages.size(), 3u) << "serve's stage processes were not found under /proc";
  ASSERT_EQ(::kill(serve, SIGKILL), 0);
  const ChildExit killed = WaitChildFor(serve, 30);
  const std::string killed_instance = "serve" + std::to_string(serve);  // its default
  serve = -1;
  ASSERT_FALSE(killed.timed_out) << "serve outlived SIGKILL by 30 s";
  const ScopeExit kill_stages([&stages] {  // a failed check below leaves none of them running
    for (const auto& [pid, start] : stages)
      if (!Ended(pid, start)) ::kill(pid, SIGKILL);
  });
  for (const auto& [pid, start] : stages) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!Ended(pid, start) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto st = ReadProcStat(pid);
    EXPECT_TRUE(Ended(pid, start))
        << "stage pid " << pid << " (" << (st ? st->comm : "?") << ") outlived serve by 60 s";
  }
  std::map<std::string, size_t> drops_at_kill;
  auto drops = [&](const std::string& id) {
    std::ifstream f(TenantDir(id) + "/trainer.log");
    size_t n = 0;
    for (std::string l; std::getline(f, l);)
      n += l.find(": stale: sampled by") != std::string::npos;
    return n;
  };
  for (const std::string& id : ids) {
    lines_at_kill[id] = LinesOf(TenantDir(id) + "/steps.jsonl");
    drops_at_kill[id] = drops(id);
  }

  serve = StartServeProcess(state_dir_);  // waits for the old stages to let go of the state dir
  for (const std::string& id : ids) {
    const pb::TenantStatus s = WaitForStatus(
        state_dir_, token[id], id,
        [](const pb::TenantStatus& t) { return t.state() == "finished"; }, 180);
    EXPECT_EQ(s.state(), "finished") << id << " was not resumed to the end (token kept?)";
    EXPECT_EQ(s.step(), 30u) << id;
  }
  // The killed serve's segments (its own instance, named by its pid) went with the new serve's
  // start: they were left to `marlaas clean`.
  const auto left = ListSegments(killed_instance);
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_TRUE(left->empty()) << left->size() << " segments of " << killed_instance << " left";
  const pb::TenantStatus after = WaitForStatus(
      state_dir_, tres.submit().token(), "tres", [](const pb::TenantStatus&) { return true; }, 10);
  EXPECT_EQ(after.state(), "finished");
  EXPECT_EQ(after.step(), 3u);
  ::kill(serve, SIGTERM);
  const ChildExit stopped = WaitChildFor(serve, 60);
  serve = -1;
  EXPECT_FALSE(stopped.timed_out) << "serve did not stop within 60 s of SIGTERM (killed)";
  for (const std::string& id : ids) {
    // The resumed rollout paces from the trainer's count of retired groups: at most one
    // staleness window of groups goes stale. (It used to count its commits from 0, below the
    // trainer's count, so nothing it had in flight counted and groups went stale by the dozen.)
    // Groups still in flight when the tenant finishes are dropped too, for that reason instead.
    EXPECT_LE(drops(id) - drops_at_kill[id], 4u)
        << id << " (before the kill: " << drops_at_kill[id] << ")";
    // steps.jsonl holds each step once, in order: the steps logged after the checkpoint it
    // resumed from (trained again) moved to steps.lost.jsonl, and nothing else did.
    const std::vector<std::string> lines = LinesOf(TenantDir(id) + "/steps.jsonl");
    std::vector<int> steps;
    for (const std::string& l : lines) steps.push_back(nlohmann::json::parse(l)["step"].get<int>());
    std::vector<int> expected(30);
    std::iota(expected.begin(), expected.end(), 1);
    EXPECT_EQ(steps, expected) << id;
    const std::vector<std::string>& before = lines_at_kill[id];
    size_t kept = 0;
    while (kept < before.size() && kept < lines.size() && lines[kept] == before[kept]) ++kept;
    // It continued from a checkpoint (one every 3 steps; it had done 7), not from step 1.
    EXPECT_GE(kept, 6u) << id << " started over";
    std::vector<std::string> moved(before.begin() + std::ptrdiff_t(kept), before.end());
    EXPECT_EQ(LinesOf(TenantDir(id) + "/steps.lost.jsonl"), moved) << id;
    EXPECT_TRUE(fs::exists(TenantDir(id) + "/state")) << id;
  }
  // serve kept its metrics log: the last line names both tenants.
  std::ifstream metrics(state_dir_ + "/metrics.jsonl");
  std::string last;
  for (std::string l; std::getline(metrics, l);) last = l;
  ASSERT_FALSE(last.empty()) << "no metrics.jsonl";
  const auto m = nlohmann::json::parse(last);
  EXPECT_EQ(m["tenants"].size(), 2u) << last;
  EXPECT_TRUE(m.contains("utilization")) << last;
  // `marlaas report` renders the state dir: both tenants finished, curves and timeline drawn.
  const std::string report = state_dir_ + "/report";
  ASSERT_EQ(cli::RunReport({"--state-dir", state_dir_, "--out", report}), 0);
  const std::string table = ReadAll(report + "/table.txt");
  for (const std::string& id : ids) {
    EXPECT_NE(table.find(id), std::string::npos) << table;
    EXPECT_NE(ReadAll(report + "/rewards.svg").find(id), std::string::npos);
  }
  EXPECT_NE(table.find("finished"), std::string::npos) << table;
  EXPECT_NE(ReadAll(report + "/utilization.svg").find("polyline"), std::string::npos);
}

// export writes only a checkpoint that matches its record, and only into a new or empty folder
// or an earlier export: a truncated adapter is refused with the file named and nothing written;
// a LATEST naming nothing falls back to the newest complete folder, or with none is named; and a
// folder holding other files is left as it was.
TEST_F(PipelineTest, ExportRefusesADamagedCheckpointAndAFolderOfOtherFiles) {
  StartService();
  auto tokens = serve::Tokens::Open(state_dir_);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  serve::ControlHandler handler(service_.get(), &*tokens);
  auto exporting = [&](const std::string& out) {
    pb::ControlRequest r = Export("ex", out);
    r.set_token(tokens->admin());
    return handler.Handle(r);
  };
  ASSERT_TRUE(service_->Admit(SmallJob("ex", "arithmetic", 2, 61)).ok());
  ASSERT_TRUE(RunUntil([&] { return service_->AllDone(); }, 120));
  // Outside the state dir: one inside it is refused (pruning could delete it, or it could be
  // taken for a tenant).
  const testing::ScopedTempDir outs("export-out");
  const std::string good = outs.path() + "/good", mine = outs.path() + "/mine";
  pb::ControlReply inside = exporting(TenantDir("ex") + "/checkpoints/mine");
  EXPECT_FALSE(inside.ok());
  EXPECT_NE(inside.error().find("is inside the service's state dir"), std::string::npos)
      << inside.error();
  EXPECT_FALSE(fs::exists(TenantDir("ex") + "/checkpoints/mine"));
  pb::ControlRequest none = Export("nosuch", good);  // named as status and logs name it
  none.set_token(tokens->admin());
  EXPECT_EQ(handler.Handle(none).error(), "no tenant 'nosuch'");
  ASSERT_TRUE(exporting(good).ok());
  EXPECT_TRUE(exporting(good).ok()) << "an earlier export is replaced";
  fs::create_directories(mine);
  std::ofstream(mine + "/notes.txt") << "mine";
  pb::ControlReply r = exporting(mine);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("holds other files (notes.txt)"), std::string::npos) << r.error();
  EXPECT_FALSE(fs::exists(mine + "/adapter_model.safetensors"));

  const std::string ckpts = TenantDir("ex") + "/checkpoints";
  std::string latest = ReadAll(ckpts + "/LATEST");
  latest = latest.substr(0, latest.find('\n'));
  const std::string weights = ckpts + "/" + latest + "/adapter_model.safetensors";
  const std::string intact = ReadAll(weights);
  fs::resize_file(weights, intact.size() / 2);
  r = exporting(outs.path() + "/damaged");
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find(weights + " does not match its recorded size/checksum"),
            std::string::npos)
      << r.error();
  EXPECT_FALSE(fs::exists(outs.path() + "/damaged"));
  // A LATEST naming no folder: the newest complete folder is exported, the one a trainer would
  // resume from (it used to be refused while good checkpoints lay beside it).
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << intact;
  ASSERT_TRUE(WriteFileAtomically(ckpts + "/LATEST", "step-gone\n").ok());
  r = exporting(outs.path() + "/fallback");
  EXPECT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(ReadAll(outs.path() + "/fallback/adapter_model.safetensors"), intact);
  // With no folder to fall back on, LATEST is named.
  for (const auto& e : fs::directory_iterator(ckpts))
    if (e.path().filename().string().rfind("step-", 0) == 0) fs::remove_all(e.path());
  r = exporting(outs.path() + "/damaged");
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("LATEST names 'step-gone', which is not a checkpoint folder"),
            std::string::npos)
      << r.error();
  EXPECT_FALSE(fs::exists(outs.path() + "/damaged"));
}

}  // namespace
}  // namespace marlaas::testing

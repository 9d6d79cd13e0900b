// The service face over the control socket with the real pipeline behind it: tenants submitted,
// watched, stopped and exported while others train, each command checked against tokens.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "base/file_util.h"
#include "model/base_weights.h"
#include "model/lora_adapter.h"
#include "procs/cli/control_client.h"
#include "procs/serve/control_handler.h"
#include "procs/serve/control_server.h"
#include "procs/serve/tokens.h"
#include "proto/job_spec.h"
#include "tests/procs/pipeline_fixture.h"

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

TEST_F(PipelineTest, SubmitStatusStopAndExportOverTheControlSocketWhileOthersTrain) {
  StartService();
  auto tokens = serve::Tokens::Open(state_dir_);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  auto server = serve::ControlServer::Listen(state_dir_ + "/control.sock");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  serve::ControlHandler handler(service_.get(), &*tokens);

  const std::string dir = state_dir_, export_dir = state_dir_ + "/exported";
  std::atomic<bool> done{false};
  std::vector<std::string> failures;  // written by the client thread, read after join
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
  };
  std::thread client([&] {
    pb::JobSpec a = SmallJob("alpha", "countdown", 12, 31),
                b = SmallJob("beta", "arithmetic", 400, 32);
    const pb::ControlReply ra = Call(dir, "", Submit(a)), rb = Call(dir, "", Submit(b));
    expect(ra.ok() && ra.submit().token().size() == 32, "submit alpha: " + ra.error());
    expect(rb.ok(), "submit beta: " + rb.error());
    const std::string ta = ra.submit().token(), tb = rb.submit().token();
    const pb::ControlReply again = Call(dir, "", Submit(a));
    expect(!again.ok() && again.error().find("already") != std::string::npos,
           "a second alpha was admitted: " + again.error());
    pb::JobSpec bad = a;
    bad.set_tenant("gamma");
    bad.set_group_size(0);
    const pb::ControlReply rbad = Call(dir, "", Submit(bad));
    expect(!rbad.ok() && rbad.error().find("group_size") != std::string::npos,
           "an invalid spec was admitted or not named: " + rbad.error());
    // Alpha trains while beta does.
    for (int i = 0; i < 300; ++i) {
      const pb::ControlReply s = Call(dir, ta, StatusOf("alpha"));
      if (s.ok() && s.status().tenants(0).step() >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    // Tokens: each sees only its own tenant; the other's commands are refused.
    const pb::ControlReply mine = Call(dir, ta, pb::ControlRequest(StatusOf("")));
    expect(
        mine.ok() && mine.status().tenants_size() == 1 && mine.status().tenants(0).id() == "alpha",
        "alpha's token does not see exactly alpha");
    expect(!Call(dir, ta, StatusOf("beta")).ok(), "alpha's token saw beta");
    expect(!Call(dir, ta, Stop("beta")).ok(), "alpha's token stopped beta");
    expect(!Call(dir, ta, Logs("beta")).ok(), "alpha's token read beta's logs");
    expect(!Call(dir, ta, Export("beta", export_dir + "-beta")).ok(),
           "alpha's token exported beta");
    expect(!Call(dir, "", StatusOf("alpha")).ok(), "no token saw alpha");
    const pb::ControlReply all = Call(dir, tokens->admin(), StatusOf(""));
    expect(all.ok() && all.status().tenants_size() == 2, "the admin does not see both");
    // Beta is stopped by its owner while alpha goes on.
    const pb::ControlReply stopped = Call(dir, tb, Stop("beta"));
    expect(stopped.ok(), "stop beta: " + stopped.error());
    const pb::ControlReply sb = Call(dir, tb, StatusOf("beta"));
    expect(sb.ok() && sb.status().tenants(0).state() == "stopped", "beta is not stopped");
    for (int i = 0; i < 600; ++i) {
      const pb::ControlReply s = Call(dir, ta, StatusOf("alpha"));
      if (s.ok() && s.status().tenants(0).state() == "finished") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    const pb::ControlReply logs = Call(dir, ta, Logs("alpha"));
    expect(logs.ok() && logs.logs().lines_size() > 0, "alpha's logs are empty: " + logs.error());
    const pb::ControlReply ex = Call(dir, ta, Export("alpha", export_dir));
    expect(ex.ok(), "export alpha: " + ex.error());
    done = true;
  });
  const bool finished = RunUntil(
      [&] { return done.load(); }, 240,
      [&] { server->Poll(0, [&](const pb::ControlRequest& r) { return handler.Handle(r); }); });
  if (!finished) done = true;
  client.join();
  ASSERT_TRUE(finished) << "the client scenario did not finish";
  for (const std::string& f : failures) ADD_FAILURE() << f;

  // Alpha finished all its steps although beta was stopped mid-run.
  bool alpha_finished = false;
  for (const serve::TenantView& v : service_->Tenants()) {
    if (std::string(v.record.id) == "alpha")
      alpha_finished = v.record.state == TenantState::kFinished;
    if (std::string(v.record.id) == "beta") {
      EXPECT_EQ(v.record.state, TenantState::kStopped);
      EXPECT_LT(v.trainer.steps, 400u);
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

}  // namespace
}  // namespace marlaas::testing

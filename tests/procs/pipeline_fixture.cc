#include "tests/procs/pipeline_fixture.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "procs/cli/base_model.h"
#include "procs/common/pipeline.h"
#include "proto/job_spec.h"
#include "tests/test_util.h"

namespace marlaas::testing {

namespace fs = std::filesystem;

std::string TestBaseModel() {
  const std::string cache = MARLAAS_TEST_CACHE_DIR;
  fs::create_directories(cache);
  const int fd = open((cache + "/.lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  flock(fd, LOCK_EX);
  auto dir = cli::EnsureTinyBase(cache, nullptr, nullptr);
  flock(fd, LOCK_UN);
  close(fd);
  EXPECT_TRUE(dir.ok()) << dir.status().ToString();
  return dir.ok() ? *dir : "";
}

pb::JobSpec SmallJob(const std::string& tenant, const std::string& task, int steps, uint64_t seed) {
  pb::JobSpec j;
  j.set_tenant(tenant);
  j.set_task(task);
  j.mutable_dataset()->set_seed(seed);
  j.mutable_dataset()->set_difficulty(1);
  j.mutable_dataset()->set_eval_prompts(32);
  j.mutable_sampling()->set_max_new_tokens(24);
  j.mutable_sampling()->set_seed(seed);
  j.set_group_size(4);
  j.set_prompts_per_step(2);
  j.set_max_steps(uint32_t(steps));
  j.set_max_staleness(1);
  j.set_checkpoint_every(3);
  ApplyJobSpecDefaults(&j);
  return j;
}

void PipelineTest::SetUp() {
  instance_ = UniqueInstance();
  state_dir_ = fs::temp_directory_path().string() + "/marlaas-pipeline-" + instance_;
  fs::remove_all(state_dir_);
}

void PipelineTest::TearDown() {
  if (service_) service_->Stop();
  service_.reset();
  // Kept for inspection when the test failed or MARLAAS_KEEP_TEST_STATE is set.
  if (!HasFailure() && !std::getenv("MARLAAS_KEEP_TEST_STATE")) fs::remove_all(state_dir_);
}

serve::ServiceOptions PipelineTest::Options() const {
  serve::ServiceOptions o;
  o.stage.instance = instance_;
  o.stage.state_dir = state_dir_;
  o.stage.model_dir = TestBaseModel();
  o.stage.threads = 1;
  o.stage.verifier_workers = 2;
  o.bin_dir = MARLAAS_BIN_DIR;
  o.max_tenants = max_tenants_;
  o.memory_budget_bytes = memory_budget_bytes_;
  o.stage.rollout_replicas = rollout_replicas_;
  o.stage.env_latency_ms = env_latency_ms_;
  o.stall_timeout_ms = stall_timeout_ms_;
  return o;
}

void PipelineTest::StartService() {
  auto s = serve::Service::Start(Options());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  service_ = std::move(*s);
}

bool PipelineTest::RunUntil(const std::function<bool()>& done, double timeout_s,
                            const std::function<void()>& each) {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));
  while (std::chrono::steady_clock::now() < end) {
    service_->Tick();
    if (each) each();
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

bool PipelineTest::Drained() const {
  for (const serve::TenantView& t : service_->Tenants())
    if (t.trainer.groups + t.trainer.groups_dropped < t.rollout.groups) return false;
  return true;
}

std::string PipelineTest::TenantDir(const std::string& tenant) const {
  return pipeline::TenantDir(state_dir_, tenant);
}

std::string PipelineTest::ReadAll(const std::string& path) const {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::set<uint64_t> PipelineTest::Produced(const std::string& tenant) const {
  std::set<uint64_t> ids;
  std::ifstream f(TenantDir(tenant) + "/produced.log");
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) ids.insert(std::stoull(line));
  return ids;
}

std::set<uint64_t> PipelineTest::Retired(const std::string& tenant) const {
  const std::string root = TenantDir(tenant) + "/checkpoints/";
  std::string latest = ReadAll(root + "LATEST");
  while (!latest.empty() && latest.back() == '\n') latest.pop_back();
  auto st = nlohmann::json::parse(ReadAll(root + latest + "/state.json"), nullptr, false);
  std::set<uint64_t> ids;
  if (st.is_object() && st.contains("retired_ranges")) {
    for (const auto& [first, last] :
         st["retired_ranges"].get<std::vector<std::pair<uint64_t, uint64_t>>>())
      for (uint64_t id = first; id <= last; ++id) ids.insert(id);
  }
  return ids;
}

std::vector<std::string> LinesOf(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  return lines;
}

}  // namespace marlaas::testing

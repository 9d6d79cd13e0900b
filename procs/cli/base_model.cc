#include "procs/cli/base_model.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "base/device_name.h"
#include "model/base_weights.h"
#include "model/device.h"
#include "model/pretrain.h"
#include "model/tokenizer.h"
#include "procs/serve/stage_gpus.h"
#include "tasks/task.h"

namespace marlaas::cli {

std::string DefaultStateDir() {
  if (const char* s = std::getenv("MARLAAS_STATE_DIR"); s && *s) return s;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/share/marlaas";
}

Result<std::string> EnsureTinyBase(const std::string& state_dir, double* seconds, bool* cached) {
  const auto t0 = std::chrono::steady_clock::now();
  model::PretrainOptions o;
  o.out_dir = state_dir + "/models/tiny";
  // Where the base will go, made first: a state dir that cannot be is named now, not after the
  // minutes of pretraining.
  std::error_code ec;
  std::filesystem::create_directories(state_dir + "/models", ec);
  if (ec) {
    return Status(StatusCode::kIo,
                  "the state dir " + state_dir + " cannot hold the base model: " + ec.message());
  }
  o.on_progress = [dir = o.out_dir, said = false](const model::PretrainProgress& p) mutable {
    if (!said) {  // only when it trains: a cached base calls no progress
      std::fprintf(stderr,
                   "no tiny base in %s yet: pretraining it first (8-10 minutes on one core, "
                   "once: it is cached there); --timeout-s counts from when the service "
                   "starts\n",
                   dir.c_str());
      said = true;
    }
    std::fprintf(stderr, "\rpretraining the tiny base: step %d/%d  loss %.3f ", p.step, p.steps,
                 double(p.loss));
    if (p.step == p.steps) std::fprintf(stderr, "\n");
  };
  const auto corpus = tasks::TinyBaseCorpus(o.seed);
  MARLAAS_ASSIGN_OR_RETURN(model::PretrainReport r, model::Pretrain(o, corpus));
  if (seconds)
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (cached) *cached = r.cached;
  return o.out_dir;
}

Status CheckBaseModel(const std::string& model_dir) {
  MARLAAS_RETURN_IF_ERROR(model::BaseWeights::Check(model_dir));
  MARLAAS_ASSIGN_OR_RETURN(model::ModelConfig config, model::ModelConfig::Load(model_dir));
  return model::LoadModelTokenizer(model_dir, config).status();
}

Status CheckDevice(const std::string& device) {
  auto flag = [](const Status& st) { return Status(st.code(), "--device: " + st.message()); };
  const Result<int> index = ParseDeviceName(device.empty() ? "cpu" : device);
  if (!index.ok()) return flag(index.status());
  if (*index < 0) return Status::Ok();
  // A model stage given its own GPU list sees other devices than serve: that is its to check.
  // A malformed list is named by its variable's name.
  for (const char* role : {"rollout", "trainer"}) {
    MARLAAS_ASSIGN_OR_RETURN(const std::optional<std::string> own,
                             serve::StageVisibleDevices(role));
    if (own) return Status::Ok();
  }
  const Status st = model::ParseDevice(device).status();
  return st.ok() ? st : flag(st);
}

}  // namespace marlaas::cli

#include "procs/serve/stage_gpus.h"

#include <cctype>
#include <cstdlib>
#include <sstream>
#include <vector>

namespace marlaas::serve {
namespace {

// A device index ("3") or a UUID as nvidia-smi prints it ("GPU-8a1b...", "MIG-...").
bool ValidDevice(const std::string& d) {
  if (d.empty()) return false;
  bool digits = true;
  for (char c : d) digits = digits && std::isdigit(static_cast<unsigned char>(c));
  if (digits) return d.size() <= 4;
  if (d.rfind("GPU-", 0) != 0 && d.rfind("MIG-", 0) != 0) return false;
  for (char c : d) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '/') return false;
  }
  return d.size() <= 96;
}

}  // namespace

std::string StageGpusVariable(const std::string& role) {
  std::string upper;
  for (char c : role) upper += char(std::toupper(static_cast<unsigned char>(c)));
  return "MARLAAS_" + upper + "_GPUS";
}

Result<std::optional<std::string>> StageVisibleDevices(const std::string& role) {
  const std::string var = StageGpusVariable(role);
  const char* value = std::getenv(var.c_str());
  if (value == nullptr) return std::optional<std::string>();
  const std::string v = value;
  if (!v.empty()) {
    std::istringstream in(v);
    for (std::string d; std::getline(in, d, ',');) {
      if (!ValidDevice(d)) {
        return Status(StatusCode::kInvalidArgument,
                      var + "='" + v + "': '" + d + "' is not a GPU index or UUID");
      }
    }
    if (v.back() == ',') {
      return Status(StatusCode::kInvalidArgument, var + "='" + v + "': trailing comma");
    }
  }
  return std::optional<std::string>(v);
}

Result<std::optional<std::string>> ReplicaVisibleDevices(int replica, int replicas) {
  MARLAAS_ASSIGN_OR_RETURN(std::optional<std::string> all, StageVisibleDevices("rollout"));
  if (replicas <= 1 || !all || all->empty()) return all;
  std::vector<std::string> gpus;
  std::istringstream in(*all);
  for (std::string d; std::getline(in, d, ',');) gpus.push_back(d);
  return std::optional<std::string>(gpus[size_t(replica) % gpus.size()]);
}

Result<std::vector<bool>> ReplicasOffTrainerGpus(int replicas) {
  MARLAAS_ASSIGN_OR_RETURN(std::optional<std::string> trainer, StageVisibleDevices("trainer"));
  std::vector<bool> off;
  for (int r = 0; r < replicas; ++r) {
    MARLAAS_ASSIGN_OR_RETURN(std::optional<std::string> rollout,
                             ReplicaVisibleDevices(r, replicas));
    off.push_back(rollout != trainer);
  }
  return off;
}

Result<bool> TrainerAndRolloutShareGpus(int replicas) {
  MARLAAS_ASSIGN_OR_RETURN(std::vector<bool> off, ReplicasOffTrainerGpus(replicas));
  MARLAAS_ASSIGN_OR_RETURN(std::optional<std::string> trainer, StageVisibleDevices("trainer"));
  if (trainer && trainer->empty()) return false;
  for (bool o : off)
    if (o) return false;
  return true;
}

}  // namespace marlaas::serve

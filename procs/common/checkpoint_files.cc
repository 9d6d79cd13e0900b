#include "procs/common/checkpoint_files.h"

#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "shm/checksum.h"

namespace marlaas::pipeline {

uint64_t CheckpointChecksum(const std::string& bytes) {
  constexpr uint64_t kSeed = 0x636b7074;  // "ckpt"
  return Checksum64(bytes.data(), bytes.size(), kSeed);
}

Result<std::string> LatestCheckpointDir(const std::string& tenant_dir) {
  const std::string root = tenant_dir + "/checkpoints";
  auto latest = ReadFile(root + "/LATEST");
  std::string name = latest.ok() ? *latest : "";
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  struct stat st {};
  if (latest.ok() && !name.empty() && name.find('/') == std::string::npos && name != "." &&
      name != ".." && ::stat((root + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return root + "/" + name;
  }
  // LATEST missing or naming no folder: the newest complete folder (it has its state.json), the
  // one the trainer resumes from when it loads.
  std::string newest;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0 && n > newest && FileExists(root + "/" + n + "/state.json"))
      newest = n;
  }
  if (!newest.empty()) return root + "/" + newest;
  if (!latest.ok() && latest.status().code() == StatusCode::kNotFound)
    return Status(StatusCode::kNotFound, "no checkpoint yet (" + root + "/LATEST)");
  if (!latest.ok()) return latest.status();
  return Status(StatusCode::kCorrupt,
                root + "/LATEST names '" + name + "', which is not a checkpoint folder there");
}

Result<std::string> ReadCheckedCheckpointFile(const std::string& dir, const std::string& name) {
  using json = nlohmann::json;
  MARLAAS_ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/state.json"));
  const json st = json::parse(text, nullptr, false);
  if (st.is_discarded() || !st.is_object() || !st.contains("files") || !st["files"].is_object())
    return Status(StatusCode::kCorrupt, dir + "/state.json is not a checkpoint state (truncated?)");
  const std::string path = dir + "/" + name;
  MARLAAS_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  const json have = {{"bytes", bytes.size()}, {"checksum", CheckpointChecksum(bytes)}};
  if (!st["files"].contains(name) || st["files"][name] != have) {
    return Status(StatusCode::kCorrupt,
                  path + " does not match its recorded size/checksum (truncated or altered)");
  }
  return bytes;
}

}  // namespace marlaas::pipeline

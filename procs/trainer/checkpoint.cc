#include "procs/trainer/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/file_util.h"
#include "model/torch_error.h"
#include "procs/common/checkpoint_files.h"

namespace marlaas::trainer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const kFiles[] = {"adapter_config.json", "adapter_model.safetensors", "optimizer.pt"};

// step-<steps>-<groups retired>: a checkpoint saved again without a new step (a finished tenant
// dropping late groups, a forced or final save) gets a new name, so the previous one is never
// deleted before its replacement is in place. Zero-padded: names sort by age.
std::string CheckpointName(const CheckpointState& s) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "step-%08llu-%012llu", (unsigned long long)s.steps,
                (unsigned long long)(s.groups_trained + s.groups_dropped));
  return buf;
}

Result<json> FileEntry(const std::string& path) {
  MARLAAS_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return json{{"bytes", bytes.size()}, {"checksum", pipeline::CheckpointChecksum(bytes)}};
}

// What every state the trainer writes satisfies: its folder's name holds its steps and retired
// groups (CheckpointName), and its version stays clear of the store's limit (published shifted
// by one bit).
Status CheckCounters(const std::string& dir, const CheckpointState& s) {
  auto bad = [&](const std::string& why) {
    return Status(StatusCode::kCorrupt, dir + "/state.json: " + why);
  };
  const std::string name = fs::path(dir).filename().string();
  unsigned long long steps = 0, retired = 0;
  const int fields = std::sscanf(name.c_str(), "step-%llu-%llu", &steps, &retired);
  if (fields >= 1 && steps != s.steps) {
    return bad("'steps' is " + std::to_string(s.steps) + ", its folder says " +
               std::to_string(steps));
  }
  if (fields == 2 && retired != s.groups_trained + s.groups_dropped) {
    return bad("'groups_trained' + 'groups_dropped' is " +
               std::to_string(s.groups_trained + s.groups_dropped) + ", its folder says " +
               std::to_string(retired));
  }
  if (s.version >= (uint64_t(1) << 62)) {
    return bad("'version' " + std::to_string(s.version) + " is past the store's limit, 2^62");
  }
  if (s.groups_degenerate > s.groups_trained) return bad("more degenerate groups than trained");
  if (!std::isfinite(s.last_reward_mean)) return bad("'last_reward_mean' is not finite");
  return Status::Ok();
}

// Loads one checkpoint folder; any mismatch names the file.
Result<LoadedCheckpoint> LoadOne(
    const std::string& dir, const model::BaseWeights& base,
    const std::function<torch::optim::Optimizer*(model::LoraAdapter*)>& make_optimizer) {
  MARLAAS_ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/state.json"));
  json st = json::parse(text, nullptr, false);
  if (st.is_discarded() || !st.is_object() || !st.contains("files")) {
    return Status(StatusCode::kCorrupt, dir + "/state.json is not a checkpoint state (truncated?)");
  }
  for (const char* name : kFiles)
    MARLAAS_RETURN_IF_ERROR(pipeline::ReadCheckedCheckpointFile(dir, name).status());
  LoadedCheckpoint out;
  out.dir = dir;
  MARLAAS_ASSIGN_OR_RETURN(out.adapter, model::LoraAdapter::ImportPeft(dir, base));
  try {
    // get<uint64_t>() wraps a negative number round: -5 steps would read as a finished tenant.
    auto counter = [&](const char* key) {
      const json& v = st.at(key);
      if (!v.is_number_unsigned())
        throw std::runtime_error(std::string("'") + key + "' is not a whole number >= 0");
      return v.get<uint64_t>();
    };
    CheckpointState& s = out.state;
    s.version = counter("version");
    s.steps = counter("steps");
    s.groups_trained = counter("groups_trained");
    s.groups_dropped = counter("groups_dropped");
    s.groups_degenerate = counter("groups_degenerate");
    s.data_cursor = counter("data_cursor");
    s.last_reward_mean = st.at("last_reward_mean").get<double>();
    MARLAAS_RETURN_IF_ERROR(CheckCounters(dir, s));
    if (st.contains("retired_ranges")) {
      if (!s.retired_groups.FromRanges(
              st["retired_ranges"].get<std::vector<std::pair<uint64_t, uint64_t>>>()))
        return Status(StatusCode::kCorrupt, dir + "/state.json: a retired range runs backwards");
    } else {  // written before the ranges: every id listed
      for (uint64_t id : st.at("retired_groups").get<std::vector<uint64_t>>())
        s.retired_groups.Insert(id);
    }
  } catch (const std::exception& e) {
    return Status(StatusCode::kCorrupt, dir + "/state.json: " + e.what());
  }
  torch::optim::Optimizer* opt = make_optimizer(&out.adapter);
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(dir + "/optimizer.pt", out.adapter.flat().device());  // the adapter's
    opt->load(archive);
  } catch (const std::exception& e) {
    return Status(StatusCode::kCorrupt,
                  dir + "/optimizer.pt: " + model::TorchErrorText(e).substr(0, 200));
  }
  return out;
}

// With the newest checkpoint at the same steps and version (nothing trained since: a finished
// tenant dropping late groups, a save forced again), its weight and optimizer files are linked
// into `tmp` instead of written again, once they still match their recorded sizes and checksums
// (a damaged one is not passed on); *files gets their entries. False, with nothing left in
// `tmp`, when there is no such checkpoint or a link fails.
bool LinkUnchangedFiles(const std::string& tenant_dir, const CheckpointState& state,
                        const std::string& tmp, json* files) {
  auto latest = pipeline::LatestCheckpointDir(tenant_dir);
  if (!latest.ok()) return false;
  auto text = ReadFile(*latest + "/state.json");
  if (!text.ok()) return false;
  const json prev = json::parse(*text, nullptr, false);
  auto same = [&](const char* key, uint64_t want) {
    return prev.contains(key) && prev[key].is_number_unsigned() &&
           prev[key].get<uint64_t>() == want;
  };
  if (prev.is_discarded() || !prev.is_object() || !prev.contains("files") ||
      !prev["files"].is_object() || !same("steps", state.steps) || !same("version", state.version))
    return false;
  std::error_code ec;
  for (const char* f : kFiles) {
    fs::create_hard_link(*latest + "/" + f, tmp + "/" + f, ec);
    auto entry =
        ec ? Result<json>(Status(StatusCode::kIo, ec.message())) : FileEntry(tmp + "/" + f);
    if (!entry.ok() || !prev["files"].contains(f) || prev["files"][f] != *entry) {
      for (const char* g : kFiles) fs::remove(tmp + "/" + g, ec);
      return false;
    }
    (*files)[f] = *entry;
  }
  return true;
}

}  // namespace

Status SaveCheckpoint(const std::string& tenant_dir, const model::LoraAdapter& adapter,
                      torch::optim::Optimizer& optimizer, const CheckpointState& state) {
  const std::string root = tenant_dir + "/checkpoints";
  const std::string name = CheckpointName(state);
  if (FileExists(root + "/" + name + "/state.json")) {
    // Nothing was trained or dropped since: the same checkpoint is already in place.
    return WriteFileAtomically(root + "/LATEST", name + "\n");
  }
  const std::string tmp = root + "/.tmp-" + name + "-" + std::to_string(getpid());
  std::error_code ec;
  // What earlier saves left half-written (a full disk, a killed trainer) would hold the space
  // the next one needs: only one trainer saves a tenant's checkpoints at a time, so every
  // unfinished folder is stale.
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path(), ec);
  }
  ec.clear();
  fs::create_directories(tmp, ec);
  if (ec) return Status(StatusCode::kIo, "creating " + tmp + ": " + ec.message());
  // Until the folder has its final name, a failure takes it away again.
  struct RemoveUnlessKept {
    std::string path;
    bool keep = false;
    ~RemoveUnlessKept() {
      std::error_code e;
      if (!keep) fs::remove_all(path, e);
    }
  } unfinished{tmp};
  json files = json::object();
  if (!LinkUnchangedFiles(tenant_dir, state, tmp, &files)) {
    MARLAAS_RETURN_IF_ERROR(adapter.ExportPeft(tmp, "marlaas-base"));
    // Serialised in memory and written by us: LibTorch's file writer throws from its destructor
    // on a full disk, which ended the trainer (std::terminate) instead of failing the save.
    std::ostringstream bytes;
    try {
      torch::serialize::OutputArchive archive;
      optimizer.save(archive);
      archive.save_to(bytes);
    } catch (const std::exception& e) {
      return Status(StatusCode::kInternal,
                    "serialising the optimizer for " + tmp + ": " + model::TorchErrorText(e));
    }
    MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(tmp + "/optimizer.pt", bytes.str()));
    for (const char* f : kFiles) {
      // write, fsync, rename: the files are durable before the folder gets its final name.
      MARLAAS_RETURN_IF_ERROR(SyncPath(tmp + "/" + f));
      MARLAAS_ASSIGN_OR_RETURN(files[f], FileEntry(tmp + "/" + f));
    }
  }
  json st = {{"version", state.version},
             {"steps", state.steps},
             {"groups_trained", state.groups_trained},
             {"groups_dropped", state.groups_dropped},
             {"groups_degenerate", state.groups_degenerate},
             {"data_cursor", state.data_cursor},
             {"last_reward_mean", state.last_reward_mean},
             {"retired_ranges", state.retired_groups.Ranges()},
             {"files", files}};
  MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(tmp + "/state.json", st.dump()));
  const std::string final_dir = root + "/" + name;
  fs::remove_all(final_dir, ec);  // an incomplete folder of that name (no state.json)
  fs::rename(tmp, final_dir, ec);
  if (ec) return Status(StatusCode::kIo, "renaming " + tmp + ": " + ec.message());
  unfinished.keep = true;
  MARLAAS_RETURN_IF_ERROR(SyncPath(root));
  MARLAAS_RETURN_IF_ERROR(WriteFileAtomically(root + "/LATEST", name + "\n"));
  // Keep the two newest, and older ones until two distinct copies of the weights are kept: folders
  // saved without a step share their files (LinkUnchangedFiles), and one damaged copy must leave
  // another to fall back to.
  std::vector<std::string> all;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) == 0) all.push_back(n);
  }
  std::sort(all.begin(), all.end());
  std::set<std::pair<dev_t, ino_t>> copies;
  size_t kept = 0;
  for (size_t i = all.size(); i-- > 0;) {
    struct stat st_buf {};
    const std::string weights = root + "/" + all[i] + "/adapter_model.safetensors";
    const bool known = ::stat(weights.c_str(), &st_buf) == 0;
    if (kept < 2 || (copies.size() < 2 && known && !copies.count({st_buf.st_dev, st_buf.st_ino}))) {
      ++kept;
      if (known) copies.insert({st_buf.st_dev, st_buf.st_ino});
      continue;
    }
    fs::remove_all(root + "/" + all[i], ec);
  }
  return Status::Ok();
}

Result<LoadedCheckpoint> LoadLatestCheckpoint(
    const std::string& tenant_dir, const model::BaseWeights& base,
    const std::function<torch::optim::Optimizer*(model::LoraAdapter*)>& make_optimizer) {
  const std::string root = tenant_dir + "/checkpoints";
  std::error_code ec;
  std::vector<std::string> all;
  if (fs::is_directory(root, ec)) {
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("step-", 0) == 0) all.push_back(n);
    }
  }
  if (all.empty()) return Status(StatusCode::kNotFound, "no checkpoint under " + root);
  std::sort(all.rbegin(), all.rend());
  std::vector<std::string> skipped, bad;
  for (const std::string& n : all) {
    auto loaded = LoadOne(root + "/" + n, base, make_optimizer);
    if (loaded.ok()) {
      const uint64_t retired = loaded->state.groups_trained + loaded->state.groups_dropped;
      for (const std::string& b : bad) {
        unsigned long long steps = 0, had = 0;
        if (std::sscanf(b.c_str(), "step-%llu-%llu", &steps, &had) == 2 && had > retired)
          loaded->lost_retired = std::max<uint64_t>(loaded->lost_retired, had - retired);
        fs::remove_all(root + "/.bad-" + b, ec);
        fs::rename(root + "/" + b, root + "/.bad-" + b, ec);
      }
      // LATEST names what loaded (export and evaluations read it), not a folder set aside.
      if (!bad.empty()) (void)WriteFileAtomically(root + "/LATEST", n + "\n");
      loaded->skipped = std::move(skipped);
      return loaded;
    }
    skipped.push_back(loaded.status().ToString());
    bad.push_back(n);
  }
  std::string why;
  for (const std::string& s : skipped) why += "; " + s;
  return Status(StatusCode::kCorrupt, "no loadable checkpoint under " + root + why);
}

}  // namespace marlaas::trainer

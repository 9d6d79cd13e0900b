#include "model/device_base.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "model/packed_weights.h"
#if MARLAAS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "shm/shared_device_region.h"
#endif

namespace marlaas::model {
#if MARLAAS_HAVE_CUDA
namespace {

// FNV-1a: the region key names the model in 63 bytes.
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// What identifies a model's bytes: its folder and each file's name, size and modification time,
// so a base rewritten in place (pretrained again) does not reuse a stale copy.
std::string ModelIdentity(const std::string& model_dir) {
  std::error_code ec;
  std::string id = std::filesystem::weakly_canonical(model_dir, ec).string();
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(model_dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const auto mtime = e.last_write_time(ec).time_since_epoch().count();
    files.push_back(e.path().filename().string() + ":" + std::to_string(e.file_size(ec)) + ":" +
                    std::to_string(mtime));
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) id += "|" + f;
  return id;
}

}  // namespace
#endif

Result<std::shared_ptr<const BaseWeights>> LoadBase(const std::string& instance,
                                                    const std::string& model_dir,
                                                    const torch::Device& device,
                                                    Deadline deadline) {
  MARLAAS_ASSIGN_OR_RETURN(std::shared_ptr<const BaseWeights> host, BaseWeights::Load(model_dir));
  if (device.is_cpu()) return host;
#if MARLAAS_HAVE_CUDA
  const int index = device.has_index() ? int(device.index()) : 0;
  cudaError_t err = cudaSetDevice(index);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kFailedPrecondition,
                  "cudaSetDevice(" + std::to_string(index) + "): " + cudaGetErrorString(err));
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, index);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kFailedPrecondition,
                  std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err));
  }
  char uuid[25];  // 12 of the UUID's 16 bytes: the region name's 32 characters allow no more
  for (int i = 0; i < 12; ++i)
    std::snprintf(uuid + 2 * i, 3, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
  const PackedLayout layout = PackLayout(*host);
  char key[64];
  std::snprintf(key, sizeof(key), "%016llx-%llu",
                (unsigned long long)Fnv1a(ModelIdentity(model_dir)),
                (unsigned long long)layout.bytes);
  MARLAAS_ASSIGN_OR_RETURN(
      SharedDeviceRegion region,
      SharedDeviceRegion::OpenOrCreate(
          instance, std::string("base-") + uuid, layout.bytes, key,
          [&](void* block, uint64_t) { return CopyPacked(*host, layout, block, device); },
          deadline));
  auto held = std::make_shared<SharedDeviceRegion>(std::move(region));
  void* block = held->data();
  return ViewPacked(host->config, layout, block, device, std::move(held));
#else
  (void)instance;
  (void)deadline;
  return Status(StatusCode::kFailedPrecondition,
                "device " + device.str() + ": this build has no CUDA (nvcc was not found)");
#endif
}

}  // namespace marlaas::model

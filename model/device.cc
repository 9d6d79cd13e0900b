#include "model/device.h"

#include "base/device_name.h"

namespace marlaas::model {

Result<torch::Device> ParseDevice(const std::string& spec) {
  MARLAAS_ASSIGN_OR_RETURN(int index, ParseDeviceName(spec.empty() ? "cpu" : spec));
  if (index < 0) return torch::Device(torch::kCPU);
  if (!torch::cuda::is_available()) {
    return Status(StatusCode::kFailedPrecondition,
                  "device '" + spec +
                      "': this LibTorch cannot run on CUDA (no CUDA build of LibTorch, or no "
                      "visible GPU); build against a CUDA LibTorch on a GPU host");
  }
  const int64_t count = int64_t(torch::cuda::device_count());
  if (index >= count) {
    return Status(
        StatusCode::kInvalidArgument,
        "device '" + spec + "': only " + std::to_string(count) + " CUDA device(s) visible");
  }
  return torch::Device(torch::kCUDA, static_cast<torch::DeviceIndex>(index));
}

std::string DeviceName(const torch::Device& device) {
  if (device.is_cpu()) return "cpu";
  return "cuda:" + std::to_string(device.has_index() ? int(device.index()) : 0);
}

}  // namespace marlaas::model

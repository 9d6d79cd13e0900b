// Where a stage runs its model: "cpu" (the default), "cuda" (the process's current CUDA device,
// i.e. the first of CUDA_VISIBLE_DEVICES) or "cuda:N". ParseDevice refuses a device that the
// LibTorch in use cannot run on, naming the reason: Debian's libtorch is CPU-only, so "cuda"
// needs the build against a CUDA LibTorch (README, "The GPU path"). Thread-safe.
#pragma once

#include <string>

#include "base/status.h"
#include "model/torch_pch.h"

namespace marlaas::model {

Result<torch::Device> ParseDevice(const std::string& spec);

// The name ParseDevice reads back ("cpu", "cuda:0").
std::string DeviceName(const torch::Device& device);

}  // namespace marlaas::model

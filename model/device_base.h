// LoadBase: the frozen base where a stage runs it. On the CPU, BaseWeights::Load (the files are
// memory-mapped, so processes share their pages). On a CUDA device, one packed f32 copy per GPU
// and service instance (model/packed_weights.h) in the shared device region "base-<GPU UUID>"
// (shm/shared_device_region.h): the first process on the GPU fills it, the others open it by
// CUDA IPC, so the rollout and the trainer on one GPU read the same bytes. The weights hold the
// region; the region's owner frees it only after the openers have closed it (or died).
// Call from the process's main thread before any other CUDA work; it makes `device` the
// process's current CUDA device.
#pragma once

#include <memory>
#include <string>

#include "base/deadline.h"
#include "base/status.h"
#include "model/base_weights.h"

namespace marlaas::model {

// kFailedPrecondition naming the reason when the build has no CUDA or the device cannot be
// used; the errors of BaseWeights::Load and SharedDeviceRegion::OpenOrCreate otherwise.
Result<std::shared_ptr<const BaseWeights>> LoadBase(const std::string& instance,
                                                    const std::string& model_dir,
                                                    const torch::Device& device, Deadline deadline);

}  // namespace marlaas::model

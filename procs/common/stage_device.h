// AttachStageAdapterStore: the service's adapter store as a stage attaches it, with the CUDA IPC
// backend when built with CUDA (a host-memory store ignores it; a CUDA IPC store in a build
// without CUDA manages slots but moves no bytes, and says so). The base weights a stage loads
// for its device come from model/device_base.h.
#pragma once

#include <string>

#include "base/status.h"
#include "shm/adapter_store.h"

namespace marlaas::pipeline {

Result<AdapterStore> AttachStageAdapterStore(const std::string& instance);

}  // namespace marlaas::pipeline

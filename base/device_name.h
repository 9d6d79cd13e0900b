// Device names as the stages take them (--device): "cpu", "cuda" (the first visible GPU) or
// "cuda:N". Parsing only; whether the build and the host can run there is model/device.h's
// check. Thread-safe.
#pragma once

#include <string>

#include "base/status.h"

namespace marlaas {

// -1 for "cpu", the GPU index for "cuda" (0) and "cuda:N"; kInvalidArgument naming the value
// otherwise.
Result<int> ParseDeviceName(const std::string& name);

}  // namespace marlaas

// AdapterFanout in a build without CUDA and NCCL: Start() says so (adapter_fanout_nccl.cc is
// the real one).
#include "procs/trainer/adapter_fanout.h"

namespace marlaas::trainer {

Result<std::unique_ptr<AdapterFanout>> AdapterFanout::Start(const std::string&) {
  return Status(StatusCode::kFailedPrecondition,
                "--adapter-broadcast needs a build with CUDA and NCCL (this one has none)");
}

}  // namespace marlaas::trainer

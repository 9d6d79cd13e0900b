// AdapterInbox in a build without CUDA and NCCL: Start() says so (adapter_inbox_nccl.cc is the
// real one).
#include "procs/rollout/adapter_inbox.h"

namespace marlaas::rollout {

Result<std::unique_ptr<AdapterInbox>> AdapterInbox::Start(const std::string&, int) {
  return Status(StatusCode::kFailedPrecondition,
                "--adapter-broadcast needs a build with CUDA and NCCL (this one has none)");
}

}  // namespace marlaas::rollout

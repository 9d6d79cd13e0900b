#include "procs/common/stage_device.h"

#if MARLAAS_HAVE_CUDA
#include "shm/cuda_adapter_memory.h"
#endif

namespace marlaas::pipeline {

Result<AdapterStore> AttachStageAdapterStore(const std::string& instance) {
#if MARLAAS_HAVE_CUDA
  return AdapterStore::Attach(instance, CudaIpcMemory());
#else
  return AdapterStore::Attach(instance);
#endif
}

}  // namespace marlaas::pipeline

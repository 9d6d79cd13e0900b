#include "base/heap.h"

#include <malloc.h>

namespace marlaas {

Status KeepFreedHeapMemory() {
  // Setting either one also turns off glibc's dynamic adjustment of both.
  if (mallopt(M_MMAP_THRESHOLD, int(kHeapMmapThresholdBytes)) != 1)
    return Status(StatusCode::kInternal, "malloc refused M_MMAP_THRESHOLD");
  if (mallopt(M_TRIM_THRESHOLD, int(kHeapTrimThresholdBytes)) != 1)
    return Status(StatusCode::kInternal, "malloc refused M_TRIM_THRESHOLD");
  return Status::Ok();
}

}  // namespace marlaas

// How many threads LibTorch may use inside one process. On the 2-core machines this project
// targets, one intra-op thread per process beat two (several processes share the cores), so 1
// is the default. Call once at process start, before any tensor work.
#pragma once

namespace marlaas::model {

// threads <= 0: the MARLAAS_THREADS environment variable if set, else 1.
void SetComputeThreads(int threads = 0);
int ComputeThreads();

}  // namespace marlaas::model

#include "model/compute_threads.h"

#include <dlfcn.h>

#include <cstdlib>

#include "model/torch_pch.h"

namespace marlaas::model {

void SetComputeThreads(int threads) {
  if (threads <= 0) {
    const char* env = std::getenv("MARLAAS_THREADS");
    threads = env != nullptr ? std::atoi(env) : 1;
    if (threads <= 0) threads = 1;
  }
  torch::set_num_threads(threads);
  // OpenBLAS (Debian's pthread build, behind LibTorch's BLAS calls) keeps its own thread pool;
  // left alone it uses every core in every process. Looked up at run time: the reference BLAS
  // has no such function.
  using SetBlasThreads = void (*)(int);
  if (auto set_blas =
          reinterpret_cast<SetBlasThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set_blas(threads);
}

int ComputeThreads() { return torch::get_num_threads(); }

}  // namespace marlaas::model

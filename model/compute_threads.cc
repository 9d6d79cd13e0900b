#include "model/compute_threads.h"

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
}

int ComputeThreads() { return torch::get_num_threads(); }

}  // namespace marlaas::model

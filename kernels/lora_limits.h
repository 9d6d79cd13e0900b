// Limits of the multi-LoRA kernels that other folders rely on (the rollout's LoraPool; the job
// spec's lora.rank range, proto/job_spec.cc, stays within it). Plain constants: no CUDA or
// LibTorch header needed.
#pragma once

namespace marlaas::kernels {

// The highest LoRA rank the CUDA kernels take: their rank-sized intermediate lives in shared
// memory sized for it (kernels/cuda/*.cuh). The CPU kernels have no such limit.
inline constexpr int kMaxCudaLoraRank = 64;

}  // namespace marlaas::kernels

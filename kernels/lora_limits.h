// Limits of the multi-LoRA kernels that other folders check before work reaches them (serve at
// admission, the rollout's LoraPool). Plain constants: no CUDA or LibTorch header needed.
#pragma once

namespace marlaas::kernels {

// The highest LoRA rank the CUDA kernels take: their rank-sized intermediate lives in shared
// memory sized for it (kernels/cuda/*.cuh). The CPU kernels have no such limit.
inline constexpr int kMaxCudaLoraRank = 64;

}  // namespace marlaas::kernels

// The CUDA half of AddLoraDelta (model/lora_apply.h): rows on a CUDA device, adapters in a
// LoraPool, the kernels/cuda BGMV (one row per segment, as in decoding) or SGMV launchers on the
// legacy default stream (the one LibTorch's ops use unless a caller sets another). Only built
// with CUDA. One thread at a time per pool.
#pragma once

#include "model/lora_apply.h"

namespace marlaas::model {

// x [N, in], y [N, out] f32 on segs.pool's device; segs.device_start/device_adapter set
// (SetPoolSegments). Adds each row's delta to y in place when y is contiguous; returns the sum.
torch::Tensor AddLoraDeltaCuda(const torch::Tensor& x, const torch::Tensor& y, int layer,
                               LoraTarget target, const LoraSegments& segs);

}  // namespace marlaas::model

// Plain reference versions of the multi-LoRA ops (lora_ops.h): textbook loops with double
// accumulation, for tests of every backend (CPU now, CUDA later) to compare against. Slow.
#pragma once

#include "kernels/lora_ops.h"

namespace marlaas::kernels::reference {

void BgmvShrink(const LoraProblem& p, const int32_t* row_adapter, const float* x, float* y);
void BgmvExpand(const LoraProblem& p, const int32_t* row_adapter, const float* y, float* out);
void SgmvShrink(const LoraProblem& p, const RowSegments& segs, const float* x, float* y);
void SgmvExpand(const LoraProblem& p, const RowSegments& segs, const float* y, float* out);
void SgmvWeightGrad(const WeightGradProblem& p, const RowSegments& segs, const float* left,
                    const float* right, float* const* grads);

}  // namespace marlaas::kernels::reference

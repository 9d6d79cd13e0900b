// Multi-LoRA ops on the CPU: y = x·Aᵀ (shrink) and out += scale·y·Bᵀ (expand), with a different
// adapter per row (BGMV, decode) or per contiguous row segment (SGMV, prefill and training), and
// SGMV's weight gradients (training's backward). A is PEFT's
// lora_A.weight [rank × in_dim]; bt is PEFT's lora_B.weight transposed, [rank × out_dim], so the
// expand is `rank` contiguous axpys per row; row-major f32. An
// adapter index < 0 means "base only": the row is left untouched. These functions assume their
// inputs are valid (the model's LoRA layer checks shapes once per batch); they are pure, and
// thread-safe on disjoint outputs. The plain reference versions live in lora_reference.h.
#pragma once

#include <cstdint>

namespace marlaas::kernels {

struct AdapterRef {
  const float* a = nullptr;   // [rank × in_dim]
  const float* bt = nullptr;  // [rank × out_dim] (Bᵀ)
  int32_t rank = 0;           // 1..kMaxLoraRank
  float scale = 0;            // alpha / rank
};

inline constexpr int32_t kMaxLoraRank = 64;

struct LoraProblem {
  int32_t rows = 0;
  int32_t in_dim = 0;   // shrink input width (x)
  int32_t out_dim = 0;  // expand output width (out)
  const AdapterRef* adapters = nullptr;
  int32_t num_adapters = 0;
  int64_t x_stride = 0;    // elements between rows of x (>= in_dim)
  int64_t y_stride = 0;    // elements between rows of y (>= the largest rank used)
  int64_t out_stride = 0;  // elements between rows of out (>= out_dim)
};

// A problem over packed row-major buffers: x [rows × in_dim], y [rows × rank_stride], out
// [rows × out_dim].
inline LoraProblem PackedLoraProblem(int32_t rows, int32_t in_dim, int32_t out_dim,
                                     const AdapterRef* adapters, int32_t num_adapters,
                                     int32_t rank_stride) {
  LoraProblem p;
  p.rows = rows;
  p.in_dim = in_dim;
  p.out_dim = out_dim;
  p.adapters = adapters;
  p.num_adapters = num_adapters;
  p.x_stride = in_dim;
  p.y_stride = rank_stride;
  p.out_stride = out_dim;
  return p;
}

// Contiguous row segments: rows [start[s], start[s+1]) use adapter[s].
struct RowSegments {
  const int32_t* start = nullptr;    // num + 1 entries, non-decreasing, start[num] <= rows
  const int32_t* adapter = nullptr;  // num entries
  int32_t num = 0;
};

// y[i, 0:rank) = x[i] · Aᵀ of row i's adapter. Rows with adapter < 0 are not written.
void BgmvShrink(const LoraProblem& p, const int32_t* row_adapter, const float* x, float* y);
// out[i] += scale · y[i, 0:rank) · Bᵀ of row i's adapter.
void BgmvExpand(const LoraProblem& p, const int32_t* row_adapter, const float* y, float* out);
void SgmvShrink(const LoraProblem& p, const RowSegments& segs, const float* x, float* y);
void SgmvExpand(const LoraProblem& p, const RowSegments& segs, const float* y, float* out);

// SGMV's weight gradients: for every segment s with adapter k = segs.adapter[s] >= 0,
//   grads[k][r, 0:width) += scale_k · Σ_{rows i of s} left[i, r] · right[i, 0:width),  r < rank_k
// (grads[k] row-major [rank_k × width]; rank and scale from adapters[k], whose a and bt are not
// read). For a delta scale·(x·Aᵀ)·Bᵀ whose output gradient is g: left = g·B (the shrink of g by
// Bᵀ) and right = x give dA; left = x·Aᵀ and right = g give d(Bᵀ). (dx is the expand of g·B by A,
// scale included: the forward's two ops with A and Bᵀ swapped; see model/lora_grad.h.)
struct WeightGradProblem {
  int32_t width = 0;  // columns of right and of each gradient
  const AdapterRef* adapters = nullptr;
  int32_t num_adapters = 0;
  int64_t left_stride = 0;   // elements between rows of left (>= the largest rank used)
  int64_t right_stride = 0;  // elements between rows of right (>= width)
};
void SgmvWeightGrad(const WeightGradProblem& p, const RowSegments& segs, const float* left,
                    const float* right, float* const* grads);

}  // namespace marlaas::kernels

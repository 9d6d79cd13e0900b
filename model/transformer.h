// Transformer: the Llama-family decoder (RMSNorm, RoPE, SwiGLU, grouped-query attention, tied or
// untied embeddings, Qwen2's q/k/v bias) over frozen BaseWeights, with a LoRA adapter per batch
// row. With autograd on (training), LoRA is computed with LibTorch ops per adapter group, so each
// adapter's `flat` receives its gradient; with autograd off (rollout), it runs the SGMV kernels:
// the CPU ones, or on a CUDA device the CUDA ones over a LoraPool (model/lora_pool.h).
// The model runs where its weights are (CPU or a CUDA device: model/device.h).
// Const methods are safe to call from several threads.
#pragma once

#include <memory>
#include <vector>

#include "model/base_weights.h"
#include "model/kv_cache.h"
#include "model/lora_adapter.h"
#include "model/lora_apply.h"
#include "model/torch_pch.h"

namespace marlaas::model {

// Which adapter each batch row uses (-1: base only). Rows of one adapter need not be adjacent.
// With a pool (Step on a CUDA device), row_adapter holds pool slots and adapters is unused.
struct LoraRouting {
  std::vector<const LoraAdapter*> adapters;
  std::vector<int32_t> row_adapter;
  const LoraPool* pool = nullptr;
};

class Transformer {
 public:
  explicit Transformer(std::shared_ptr<const BaseWeights> weights);

  const ModelConfig& config() const { return w_->config; }
  const BaseWeights& weights() const { return *w_; }
  // Where the weights live; every tensor the model makes is made there, and inputs are moved
  // there (tokens may come from the CPU). Results stay on this device.
  torch::Device device() const { return w_->embed.device(); }

  // Causal forward over whole sequences. tokens: [B, T] int64 (right-padded rows are fine: a
  // position never attends to later ones). Returns logits [B, T, vocab] (f32).
  torch::Tensor Forward(const torch::Tensor& tokens, const LoraRouting* lora = nullptr) const;
  // The final-norm hidden states [B, T, hidden]; logits = Hidden · lm_headᵀ.
  torch::Tensor Hidden(const torch::Tensor& tokens, const LoraRouting* lora = nullptr) const;

  // Hidden() for sequences that share prefixes, computing each shared prefix once (training: a
  // GRPO group's completions share their prompt). prefix_tokens [P, Lp] int64 holds P prefixes
  // (right-padded); suffix row b continues prefix row prefix_of[b] after its first offset[b]
  // tokens (0: a row of its own, attending to no prefix) with suffix_tokens[b] ([B, Ls], right
  // padded). Each routing has one adapter per row of its tensor (may be null: base only).
  // Returns the final-norm hidden states of the suffix rows, [B, Ls, hidden]: what Hidden() gives
  // at those positions of the whole sequences, up to rounding, and with the prefix's gradient
  // summed over the rows that continue it.
  torch::Tensor HiddenShared(const torch::Tensor& prefix_tokens, const LoraRouting* prefix_lora,
                             const torch::Tensor& suffix_tokens, const LoraRouting* suffix_lora,
                             const std::vector<int64_t>& prefix_of,
                             const std::vector<int64_t>& offset) const;

  // Incremental forward for generation (call with autograd off). Row b appends new_tokens[b]
  // (int64 [t_b], t_b >= 1: a whole prompt when the sequence joins, one token per decode step)
  // to the sequence whose cache is caches[b], attending to everything cached before it. Rows
  // may mix prefill and decode and use different adapters (lora: one adapter index per row, may
  // be null). Returns the logits of each row's last new token, [B, vocab].
  torch::Tensor Step(const std::vector<torch::Tensor>& new_tokens,
                     const std::vector<KvCache*>& caches, const LoraRouting* lora) const;

  // x [N, in] rows through projection `t` of `layer`, plus bias and each row's LoRA delta.
  torch::Tensor Project(const torch::Tensor& x, int layer, LoraTarget t,
                        const LoraSegments* lora) const;
  // cos and sin tables [T, head_dim] for the given positions (int64 [T]).
  std::pair<torch::Tensor, torch::Tensor> Rope(const torch::Tensor& positions) const;

 private:
  torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const;
  torch::Tensor Block(const torch::Tensor& x, int layer, const torch::Tensor& cos,
                      const torch::Tensor& sin, const LoraSegments* lora) const;
  // One layer of HiddenShared: the prefix rows xp as Block does, and the suffix rows xs
  // attending to their prefix's keys and values (rows prefix_index) and causally to their own;
  // masked: [B, 1, Ls, Lp + Ls], true where a suffix position may not look. Without
  // prefix_out (the last layer) the prefix's own output is not computed (undefined).
  std::pair<torch::Tensor, torch::Tensor> SharedBlock(
      const torch::Tensor& xp, const torch::Tensor& xs, int layer, const torch::Tensor& cos_p,
      const torch::Tensor& sin_p, const torch::Tensor& cos_s, const torch::Tensor& sin_s,
      const torch::Tensor& prefix_index, const torch::Tensor& masked, const LoraSegments* lora_p,
      const LoraSegments* lora_s, bool prefix_out) const;
  // The MLP half of a block on rows [N, hidden]: x + down(silu(gate) * up) of the post-norm.
  torch::Tensor Mlp(const torch::Tensor& x, int layer, const LoraSegments* lora) const;

  std::shared_ptr<const BaseWeights> w_;
  torch::Tensor inv_freq_;  // [head_dim / 2]
};

// RoPE as Hugging Face applies it: x·cos + rotate_half(x)·sin, halves not interleaved.
// x: [B, heads, T, head_dim]; cos, sin: [T, head_dim].
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace marlaas::model

#include "model/transformer.h"

#include <cmath>

namespace marlaas::model {

Transformer::Transformer(std::shared_ptr<const BaseWeights> weights) : w_(std::move(weights)) {
  const auto& c = w_->config;
  auto idx = torch::arange(0, c.head_dim, 2, torch::kFloat64) / double(c.head_dim);
  inv_freq_ = torch::pow(double(c.rope_theta), idx).reciprocal().to(torch::kFloat32).to(device());
}

std::pair<torch::Tensor, torch::Tensor> Transformer::Rope(const torch::Tensor& positions) const {
  auto freqs = positions.to(torch::kFloat32).unsqueeze(1) * inv_freq_.unsqueeze(0);  // [T, d/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  auto halves = x.chunk(2, -1);  // one backward for both halves (two narrows: two full zeros)
  auto rotated = torch::cat({-halves[1], halves[0]}, -1);
  return x * cos + rotated * sin;
}

torch::Tensor Transformer::RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const {
  auto var = x.pow(2).mean(-1, /*keepdim=*/true);
  return x * torch::rsqrt(var + w_->config.rms_norm_eps) * weight;
}

torch::Tensor Transformer::Project(const torch::Tensor& x, int layer, LoraTarget t,
                                   const LoraSegments* lora) const {
  const LayerWeights& L = w_->layers[size_t(layer)];
  auto y = torch::matmul(x, L.proj[size_t(t)].t());
  if (w_->config.qkv_bias) {
    if (t == LoraTarget::kQ) y = y + L.q_bias;
    if (t == LoraTarget::kK) y = y + L.k_bias;
    if (t == LoraTarget::kV) y = y + L.v_bias;
  }
  if (lora != nullptr) y = AddLoraDelta(x, y, layer, t, *lora);
  return y;
}

torch::Tensor Transformer::Mlp(const torch::Tensor& x, int layer, const LoraSegments* lora) const {
  auto m = RmsNorm(x, w_->layers[size_t(layer)].post_norm);
  auto gate = Project(m, layer, LoraTarget::kGate, lora);
  auto up = Project(m, layer, LoraTarget::kUp, lora);
  return x + Project(torch::silu(gate) * up, layer, LoraTarget::kDown, lora);
}

torch::Tensor Transformer::Block(const torch::Tensor& x, int layer, const torch::Tensor& cos,
                                 const torch::Tensor& sin, const LoraSegments* lora) const {
  const auto& c = w_->config;
  const int64_t B = x.size(0), T = x.size(1), D = c.head_dim;
  auto h = RmsNorm(x, w_->layers[size_t(layer)].input_norm).reshape({B * T, -1});
  auto q = Project(h, layer, LoraTarget::kQ, lora).view({B, T, c.num_heads, D}).transpose(1, 2);
  auto k = Project(h, layer, LoraTarget::kK, lora).view({B, T, c.num_kv_heads, D}).transpose(1, 2);
  auto v = Project(h, layer, LoraTarget::kV, lora).view({B, T, c.num_kv_heads, D}).transpose(1, 2);
  q = ApplyRope(q, cos, sin);
  k = ApplyRope(k, cos, sin);
  const int64_t group = c.num_heads / c.num_kv_heads;
  if (group > 1) {
    k = k.repeat_interleave(group, 1);
    v = v.repeat_interleave(group, 1);
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(D));
  auto causal = torch::ones({T, T}, x.options().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(causal, -std::numeric_limits<float>::infinity());
  auto attn = torch::matmul(torch::softmax(scores, -1), v);  // [B, H, T, D]
  attn = attn.transpose(1, 2).reshape({B * T, c.num_heads * D});
  auto x2 = x.reshape({B * T, -1}) + Project(attn, layer, LoraTarget::kO, lora);
  return Mlp(x2, layer, lora).view({B, T, -1});
}

torch::Tensor Transformer::Hidden(const torch::Tensor& tokens, const LoraRouting* lora) const {
  TORCH_CHECK(tokens.dim() == 2, "tokens must be [batch, time]");
  const int64_t T = tokens.size(1);
  auto x =
      w_->embed.index_select(0, tokens.to(device()).reshape({-1})).view({tokens.size(0), T, -1});
  auto [cos, sin] = Rope(torch::arange(T, torch::TensorOptions(torch::kInt64).device(device())));
  LoraSegments segs;
  if (lora != nullptr) {
    TORCH_CHECK(int64_t(lora->row_adapter.size()) == tokens.size(0), "one adapter per batch row");
    TORCH_CHECK(lora->pool == nullptr, "a LoraPool serves Step only");
    segs = LoraSegments::Uniform(lora->adapters, lora->row_adapter, int32_t(T));
  }
  for (int l = 0; l < int(w_->layers.size()); ++l) {
    x = Block(x, l, cos, sin, lora != nullptr ? &segs : nullptr);
  }
  return RmsNorm(x, w_->final_norm);
}

torch::Tensor Transformer::Forward(const torch::Tensor& tokens, const LoraRouting* lora) const {
  return torch::matmul(Hidden(tokens, lora), w_->lm_head.t());
}

}  // namespace marlaas::model

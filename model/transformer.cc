#include "model/transformer.h"

#include <cmath>
#include <tuple>

#include "model/attention.h"

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
  auto causal = torch::ones({1, 1, T, T}, x.options().dtype(torch::kBool)).triu(1);
  auto attn = Attend(q, k, v, causal, 1.0 / std::sqrt(double(D)));  // [B, H, T, D]
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
    if (torch::GradMode::is_enabled()) segs.views = LoraViews::Of(lora->adapters);
  }
  for (int l = 0; l < int(w_->layers.size()); ++l) {
    x = Block(x, l, cos, sin, lora != nullptr ? &segs : nullptr);
  }
  return RmsNorm(x, w_->final_norm);
}

std::pair<torch::Tensor, torch::Tensor> Transformer::SharedBlock(
    const torch::Tensor& xp, const torch::Tensor& xs, int layer, const torch::Tensor& cos_p,
    const torch::Tensor& sin_p, const torch::Tensor& cos_s, const torch::Tensor& sin_s,
    const torch::Tensor& prefix_index, const torch::Tensor& masked, const LoraSegments* lora_p,
    const LoraSegments* lora_s, bool prefix_out) const {
  const auto& c = w_->config;
  const int64_t P = xp.size(0), Lp = xp.size(1), B = xs.size(0), Ls = xs.size(1), D = c.head_dim;
  const torch::Tensor& norm = w_->layers[size_t(layer)].input_norm;
  auto qkv = [&](const torch::Tensor& x, int64_t rows, int64_t T, const LoraSegments* lora) {
    auto h = RmsNorm(x, norm).reshape({rows * T, -1});
    auto q =
        Project(h, layer, LoraTarget::kQ, lora).view({rows, T, c.num_heads, D}).transpose(1, 2);
    auto k =
        Project(h, layer, LoraTarget::kK, lora).view({rows, T, c.num_kv_heads, D}).transpose(1, 2);
    auto v =
        Project(h, layer, LoraTarget::kV, lora).view({rows, T, c.num_kv_heads, D}).transpose(1, 2);
    return std::make_tuple(q, k, v);
  };
  auto [qp, kp, vp] = qkv(xp, P, Lp, lora_p);
  auto [qs, ks, vs] = qkv(xs, B, Ls, lora_s);
  qp = ApplyRope(qp, cos_p, sin_p);
  kp = ApplyRope(kp, cos_p, sin_p);
  qs = ApplyRope(qs, cos_s, sin_s);  // per-row positions: cos_s [B, 1, Ls, D]
  ks = ApplyRope(ks, cos_s, sin_s);
  // Each suffix row sees its prefix's keys and values, then its own.
  auto k_all = torch::cat({kp.index_select(0, prefix_index), ks}, 2);
  auto v_all = torch::cat({vp.index_select(0, prefix_index), vs}, 2);
  const double scale = 1.0 / std::sqrt(double(D));
  auto attn_s = Attend(qs, k_all, v_all, masked, scale);
  auto finish = [&](const torch::Tensor& x, const torch::Tensor& attn, int64_t rows, int64_t T,
                    const LoraSegments* lora) {
    auto a = attn.transpose(1, 2).reshape({rows * T, c.num_heads * D});
    auto x2 = x.reshape({rows * T, -1}) + Project(a, layer, LoraTarget::kO, lora);
    return Mlp(x2, layer, lora).view({rows, T, -1});
  };
  torch::Tensor out_p;  // the last layer's prefix output is not needed: its keys and values are
  if (prefix_out) {
    auto causal = torch::ones({1, 1, Lp, Lp}, xp.options().dtype(torch::kBool)).triu(1);
    out_p = finish(xp, Attend(qp, kp, vp, causal, scale), P, Lp, lora_p);
  }
  return {out_p, finish(xs, attn_s, B, Ls, lora_s)};
}

torch::Tensor Transformer::HiddenShared(const torch::Tensor& prefix_tokens,
                                        const LoraRouting* prefix_lora,
                                        const torch::Tensor& suffix_tokens,
                                        const LoraRouting* suffix_lora,
                                        const std::vector<int64_t>& prefix_of,
                                        const std::vector<int64_t>& offset) const {
  TORCH_CHECK(prefix_tokens.dim() == 2 && suffix_tokens.dim() == 2,
              "prefix and suffix tokens must be [rows, time]");
  const int64_t P = prefix_tokens.size(0), Lp = prefix_tokens.size(1);
  const int64_t B = suffix_tokens.size(0), Ls = suffix_tokens.size(1);
  TORCH_CHECK(int64_t(prefix_of.size()) == B && int64_t(offset.size()) == B,
              "one prefix row and offset per suffix row");
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(prefix_of[size_t(b)] >= 0 && prefix_of[size_t(b)] < P, "prefix row out of range");
    TORCH_CHECK(offset[size_t(b)] >= 0 && offset[size_t(b)] <= Lp, "prefix offset out of range");
  }
  const auto on_device = torch::TensorOptions(torch::kInt64).device(device());
  auto embed = [&](const torch::Tensor& tokens) {
    return w_->embed.index_select(0, tokens.to(device()).reshape({-1}))
        .view({tokens.size(0), tokens.size(1), -1});
  };
  auto xp = embed(prefix_tokens), xs = embed(suffix_tokens);
  auto [cos_p, sin_p] = Rope(torch::arange(Lp, on_device));
  auto offsets = torch::tensor(offset, torch::kInt64).to(device());
  auto positions = offsets.unsqueeze(1) + torch::arange(Ls, on_device).unsqueeze(0);  // [B, Ls]
  auto [cos_s, sin_s] = Rope(positions.reshape({-1}));
  cos_s = cos_s.view({B, 1, Ls, -1});
  sin_s = sin_s.view({B, 1, Ls, -1});
  // A suffix position looks at its prefix's first offset[b] tokens and its own row up to itself.
  auto prefix_masked = torch::arange(Lp, on_device).unsqueeze(0) >= offsets.unsqueeze(1);
  auto own_masked = torch::ones({Ls, Ls}, on_device.dtype(torch::kBool)).triu(1);
  auto masked = torch::cat({prefix_masked.view({B, 1, 1, Lp}).expand({B, 1, Ls, Lp}),
                            own_masked.view({1, 1, Ls, Ls}).expand({B, 1, Ls, Ls})},
                           3);
  auto prefix_index = torch::tensor(prefix_of, torch::kInt64).to(device());
  LoraSegments segs_p, segs_s;
  auto segments = [](const LoraRouting* lora, int64_t rows, int64_t T, LoraSegments* segs) {
    if (lora == nullptr) return false;
    TORCH_CHECK(int64_t(lora->row_adapter.size()) == rows, "one adapter per batch row");
    TORCH_CHECK(lora->pool == nullptr, "a LoraPool serves Step only");
    *segs = LoraSegments::Uniform(lora->adapters, lora->row_adapter, int32_t(T));
    return true;
  };
  const bool has_p = segments(prefix_lora, P, Lp, &segs_p);
  const bool has_s = segments(suffix_lora, B, Ls, &segs_s);
  if (torch::GradMode::is_enabled()) {
    // Each adapter split once for the forward (model/lora_views.h), shared by prefix and suffix
    // rows when they route over the same adapters (as rl::MultiTenantStep's do).
    if (has_s) segs_s.views = LoraViews::Of(segs_s.adapters);
    if (has_p)
      segs_p.views = has_s && segs_p.adapters == segs_s.adapters ? segs_s.views
                                                                 : LoraViews::Of(segs_p.adapters);
  }
  const int layers = int(w_->layers.size());
  for (int l = 0; l < layers; ++l) {
    std::tie(xp, xs) = SharedBlock(xp, xs, l, cos_p, sin_p, cos_s, sin_s, prefix_index, masked,
                                   has_p ? &segs_p : nullptr, has_s ? &segs_s : nullptr,
                                   /*prefix_out=*/l + 1 < layers);
  }
  return RmsNorm(xs, w_->final_norm);
}

torch::Tensor Transformer::Forward(const torch::Tensor& tokens, const LoraRouting* lora) const {
  return torch::matmul(Hidden(tokens, lora), w_->lm_head.t());
}

}  // namespace marlaas::model

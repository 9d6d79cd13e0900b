// Transformer::Step: the incremental (KV-cache) forward used by the rollout's continuous
// batching. All rows' new tokens are packed into one [N, hidden] matrix so every projection is
// one matmul (plus one SGMV/BGMV for the LoRA deltas); attention runs per row over its cache.
#include <cmath>

#include "model/transformer.h"

namespace marlaas::model {

torch::Tensor Transformer::Step(const std::vector<torch::Tensor>& new_tokens,
                                const std::vector<KvCache*>& caches,
                                const LoraRouting* lora) const {
  const auto& c = w_->config;
  const size_t B = new_tokens.size();
  TORCH_CHECK(B > 0 && caches.size() == B, "one cache per row");
  TORCH_CHECK(!torch::GradMode::is_enabled(), "Step is for generation: disable autograd");
  std::vector<int64_t> count(B), begin(B);
  std::vector<torch::Tensor> positions;
  int64_t n = 0;
  for (size_t b = 0; b < B; ++b) {
    count[b] = new_tokens[b].numel();
    TORCH_CHECK(count[b] > 0, "every row needs at least one new token");
    begin[b] = n;
    n += count[b];
    positions.push_back(torch::arange(caches[b]->length(), caches[b]->length() + count[b],
                                      torch::TensorOptions(torch::kInt64).device(device())));
  }
  LoraSegments segs;
  if (lora != nullptr) {
    TORCH_CHECK(lora->row_adapter.size() == B, "one adapter index per row");
    segs.adapters = lora->adapters;
    segs.start.push_back(0);
    for (size_t b = 0; b < B; ++b) {
      segs.adapter.push_back(lora->row_adapter[b]);
      segs.start.push_back(int32_t(begin[b] + count[b]));
    }
    if (lora->pool != nullptr) segs.SetPoolSegments(lora->pool);
  }
  const LoraSegments* seg_ptr = lora != nullptr ? &segs : nullptr;
  auto tokens = torch::cat(new_tokens).to(device(), torch::kInt64);
  auto x = w_->embed.index_select(0, tokens);     // [N, hidden]
  auto [cos, sin] = Rope(torch::cat(positions));  // [N, D]
  cos = cos.unsqueeze(1);                         // broadcast over heads: [N, 1, D]
  sin = sin.unsqueeze(1);
  const int64_t D = c.head_dim, group = c.num_heads / c.num_kv_heads;
  const double inv_sqrt_d = 1.0 / std::sqrt(double(D));
  for (int l = 0; l < c.num_layers; ++l) {
    auto h = RmsNorm(x, w_->layers[size_t(l)].input_norm);
    auto q = ApplyRope(Project(h, l, LoraTarget::kQ, seg_ptr).view({n, c.num_heads, D}), cos, sin);
    auto k =
        ApplyRope(Project(h, l, LoraTarget::kK, seg_ptr).view({n, c.num_kv_heads, D}), cos, sin);
    auto v = Project(h, l, LoraTarget::kV, seg_ptr).view({n, c.num_kv_heads, D});
    std::vector<torch::Tensor> outs;
    for (size_t b = 0; b < B; ++b) {
      const int64_t t = count[b], past = caches[b]->length();
      caches[b]->Append(l, k.narrow(0, begin[b], t).transpose(0, 1),
                        v.narrow(0, begin[b], t).transpose(0, 1));
      auto keys = caches[b]->Keys(l, t), values = caches[b]->Values(l, t);  // [KV, past + t, D]
      if (group > 1) {
        keys = keys.repeat_interleave(group, 0);
        values = values.repeat_interleave(group, 0);
      }
      auto qb = q.narrow(0, begin[b], t).transpose(0, 1);                  // [H, t, D]
      auto scores = torch::matmul(qb, keys.transpose(1, 2)) * inv_sqrt_d;  // [H, t, past + t]
      if (t > 1) {  // new token i may see keys up to past + i
        auto mask = torch::ones({t, past + t}, x.options().dtype(torch::kBool)).triu(past + 1);
        scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
      }
      outs.push_back(
          torch::matmul(torch::softmax(scores, -1), values).transpose(0, 1).reshape({t, -1}));
    }
    x = x + Project(torch::cat(outs, 0), l, LoraTarget::kO, seg_ptr);
    x = Mlp(x, l, seg_ptr);
  }
  for (size_t b = 0; b < B; ++b) caches[b]->Commit(count[b]);
  std::vector<int64_t> last(B);
  for (size_t b = 0; b < B; ++b) last[b] = begin[b] + count[b] - 1;
  auto final_rows = RmsNorm(x.index_select(0, torch::tensor(last).to(device())), w_->final_norm);
  return torch::matmul(final_rows, w_->lm_head.t());
}

}  // namespace marlaas::model

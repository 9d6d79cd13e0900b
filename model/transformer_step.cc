// Transformer::Step: the incremental (KV-cache) forward used by the rollout's continuous
// batching. All rows' new tokens are packed into one [N, hidden] matrix so every projection is
// one matmul (plus one SGMV/BGMV for the LoRA deltas). Attention: when the decoding rows (one new
// token each) keep their caches in one KvArena, they append and attend together, a fixed handful
// of ops per layer whatever the batch (keys gathered and padded to the longest row, the rest
// masked); rows that prefill, or whose caches are not in a shared arena, attend one by one.
#include <cmath>
#include <limits>

#include "model/transformer.h"

namespace marlaas::model {

namespace {

using torch::indexing::Slice;

// The decoding rows that attend together: their token (= row) indices in the packed batch,
// their slots and positions in the arena they share.
struct DecodeBatch {
  KvArena* arena = nullptr;
  std::vector<size_t> rows;
  torch::Tensor token_index, slots, positions;  // int64 [rows]
  torch::Tensor mask;                           // bool [rows, 1, 1, longest]: past the row's end
  int64_t longest = 0;                          // positions to gather: max(position) + 1
  bool all = false;                             // every row of the step decodes in it
};

DecodeBatch PlanDecode(const std::vector<int64_t>& count, const std::vector<int64_t>& begin,
                       const std::vector<KvCache*>& caches, torch::Device device) {
  DecodeBatch d;
  std::vector<int64_t> token_index, slots, positions;
  int64_t shortest = std::numeric_limits<int64_t>::max();
  for (size_t b = 0; b < caches.size(); ++b) {
    if (count[b] != 1) continue;
    if (d.arena == nullptr) d.arena = caches[b]->arena();
    if (caches[b]->arena() != d.arena) return DecodeBatch{};  // mixed arenas: row by row
    d.rows.push_back(b);
    token_index.push_back(begin[b]);
    slots.push_back(caches[b]->slot());
    positions.push_back(caches[b]->length());
    d.longest = std::max(d.longest, caches[b]->length() + 1);
    shortest = std::min(shortest, caches[b]->length() + 1);
  }
  if (d.rows.size() < 2) return DecodeBatch{};  // nothing to batch
  d.all = d.rows.size() == caches.size();
  const auto i64 = torch::TensorOptions(torch::kInt64);
  d.token_index = torch::tensor(token_index, i64).to(device);
  d.slots = torch::tensor(slots, i64).to(device);
  d.positions = torch::tensor(positions, i64).to(device);
  if (shortest < d.longest) {
    d.mask = torch::arange(d.longest, i64.device(device)).unsqueeze(0) > d.positions.unsqueeze(1);
    d.mask = d.mask.view({int64_t(d.rows.size()), 1, 1, d.longest});
  }
  d.arena->Reserve(d.longest);
  return d;
}

}  // namespace

torch::Tensor Transformer::Step(const std::vector<torch::Tensor>& new_tokens,
                                const std::vector<KvCache*>& caches,
                                const LoraRouting* lora) const {
  const auto& c = w_->config;
  const size_t B = new_tokens.size();
  TORCH_CHECK(B > 0 && caches.size() == B, "one cache per row");
  TORCH_CHECK(!torch::GradMode::is_enabled(), "Step is for generation: disable autograd");
  std::vector<int64_t> count(B), begin(B), positions;
  int64_t n = 0;
  for (size_t b = 0; b < B; ++b) {
    count[b] = new_tokens[b].numel();
    TORCH_CHECK(count[b] > 0, "every row needs at least one new token");
    begin[b] = n;
    n += count[b];
    for (int64_t i = 0; i < count[b]; ++i) positions.push_back(caches[b]->length() + i);
    caches[b]->arena()->Reserve(caches[b]->length() + count[b]);  // no reallocation mid-step
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
  const DecodeBatch dec = PlanDecode(count, begin, caches, device());
  std::vector<bool> batched(B, false);
  for (size_t b : dec.rows) batched[b] = true;
  auto tokens = torch::cat(new_tokens).to(device(), torch::kInt64);
  auto x = w_->embed.index_select(0, tokens);                                    // [N, hidden]
  auto [cos, sin] = Rope(torch::tensor(positions, torch::kInt64).to(device()));  // [N, D]
  cos = cos.unsqueeze(1);  // broadcast over heads: [N, 1, D]
  sin = sin.unsqueeze(1);
  const int64_t D = c.head_dim, KV = c.num_kv_heads, group = c.num_heads / KV;
  const double inv_sqrt_d = 1.0 / std::sqrt(double(D));
  const float inf = std::numeric_limits<float>::infinity();
  for (int l = 0; l < c.num_layers; ++l) {
    auto h = RmsNorm(x, w_->layers[size_t(l)].input_norm);
    auto q = ApplyRope(Project(h, l, LoraTarget::kQ, seg_ptr).view({n, c.num_heads, D}), cos, sin);
    auto k = ApplyRope(Project(h, l, LoraTarget::kK, seg_ptr).view({n, KV, D}), cos, sin);
    auto v = Project(h, l, LoraTarget::kV, seg_ptr).view({n, KV, D});
    torch::Tensor attn;  // [N, heads * D]
    if (!dec.rows.empty()) {
      const int64_t nd = int64_t(dec.rows.size());
      const auto pick = [&](const torch::Tensor& t) {
        return dec.all ? t : t.index_select(0, dec.token_index);
      };
      torch::Tensor keys_all =
          dec.arena->keys(l);  // handles: index_put_ writes the arena  // [slots, KV, capacity, D]
      torch::Tensor values_all = dec.arena->values(l);
      keys_all.index_put_({dec.slots, Slice(), dec.positions}, pick(k));
      values_all.index_put_({dec.slots, Slice(), dec.positions}, pick(v));
      auto keys = keys_all.narrow(2, 0, dec.longest).index_select(0, dec.slots);  // [nd, KV, L, D]
      auto values = values_all.narrow(2, 0, dec.longest).index_select(0, dec.slots);
      auto qd = pick(q).view({nd, KV, group, D});                          // head = kv * group + g
      auto scores = torch::matmul(qd, keys.transpose(2, 3)) * inv_sqrt_d;  // [nd, KV, group, L]
      if (dec.mask.defined()) scores = scores.masked_fill(dec.mask, -inf);
      auto out = torch::matmul(torch::softmax(scores, -1), values).reshape({nd, -1});
      if (dec.all) {
        attn = out;
      } else {
        attn = torch::empty({n, c.num_heads * D}, x.options());
        attn.index_copy_(0, dec.token_index, out);
      }
    } else {
      attn = torch::empty({n, c.num_heads * D}, x.options());
    }
    for (size_t b = 0; b < B; ++b) {
      if (batched[b]) continue;
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
        scores = scores.masked_fill(mask, -inf);
      }
      attn.narrow(0, begin[b], t)
          .copy_(
              torch::matmul(torch::softmax(scores, -1), values).transpose(0, 1).reshape({t, -1}));
    }
    x = x + Project(attn, l, LoraTarget::kO, seg_ptr);
    x = Mlp(x, l, seg_ptr);
  }
  for (size_t b = 0; b < B; ++b) caches[b]->Commit(count[b]);
  std::vector<int64_t> last(B);
  for (size_t b = 0; b < B; ++b) last[b] = begin[b] + count[b] - 1;
  auto final_rows = RmsNorm(x.index_select(0, torch::tensor(last).to(device())), w_->final_norm);
  return torch::matmul(final_rows, w_->lm_head.t());
}

}  // namespace marlaas::model

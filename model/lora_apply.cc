#include "model/lora_apply.h"

#include <algorithm>
#include <map>

#include "kernels/lora_ops.h"
#include "model/lora_grad.h"
#include "model/lora_pool.h"
#if MARLAAS_HAVE_CUDA
#include "model/lora_apply_cuda.h"
#endif

namespace marlaas::model {
namespace {

bool Uses(const LoraSegments& segs, size_t s, LoraTarget t) {
  const int32_t k = segs.adapter[s];
  return k >= 0 && segs.adapters[size_t(k)] != nullptr && segs.adapters[size_t(k)]->has(t);
}

// Adapter k's matrices: from the forward's split views when there are any.
torch::Tensor AOf(const LoraSegments& segs, size_t k, int layer, LoraTarget t) {
  return segs.views.empty() ? segs.adapters[k]->A(layer, t) : segs.views[k]->A(layer, t);
}
torch::Tensor BTOf(const LoraSegments& segs, size_t k, int layer, LoraTarget t) {
  return segs.views.empty() ? segs.adapters[k]->BT(layer, t) : segs.views[k]->BT(layer, t);
}

// Segments of one rank whose rows are padded to a common length and computed with two batched
// matrix products: a group's ops do not grow with its segments.
struct SegmentGroup {
  std::vector<size_t> segments;  // longest first
  int64_t rows = 0;              // the group's padded length: its first (longest) segment's
};

// The segments adapting target t (with rows) grouped for BatchedDelta: by rank, and within a
// rank, longest first, a new group whenever padding to its first segment would more than double
// a segment's rows (so a group computes at most twice its rows).
std::vector<SegmentGroup> GroupSegments(const LoraSegments& segs,
                                        const std::vector<int64_t>& lengths, LoraTarget t) {
  std::map<uint32_t, std::vector<size_t>> by_rank;
  for (size_t s = 0; s < segs.adapter.size(); ++s) {
    if (lengths[s] == 0 || !Uses(segs, s, t)) continue;
    by_rank[segs.adapters[size_t(segs.adapter[s])]->layout().rank].push_back(s);
  }
  std::vector<SegmentGroup> groups;
  for (auto& [rank, members] : by_rank) {
    std::stable_sort(members.begin(), members.end(),
                     [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
    const size_t first_group = groups.size();
    for (size_t s : members) {
      if (groups.size() == first_group || lengths[s] * 2 < groups.back().rows) {
        groups.emplace_back();
        groups.back().rows = lengths[s];
      }
      groups.back().segments.push_back(s);
    }
  }
  return groups;
}

// The deltas of a group's rows, added to `out` (rows in x's order): its segments' rows gathered
// into [G, rows, in] (a short segment repeats its last row; those results are dropped), two
// batched products with the stacked A and Bᵀ, each segment's scale, scattered back.
torch::Tensor BatchedDelta(const torch::Tensor& x, const torch::Tensor& out, int layer,
                           LoraTarget t, const LoraSegments& segs,
                           const std::vector<int64_t>& lengths, const SegmentGroup& g) {
  const int64_t G = int64_t(g.segments.size()), L = g.rows;
  std::vector<torch::Tensor> a, bt;
  std::vector<float> scale;
  for (size_t s : g.segments) {
    const size_t ak = size_t(segs.adapter[s]);
    a.push_back(AOf(segs, ak, layer, t));
    bt.push_back(BTOf(segs, ak, layer, t));
    scale.push_back(segs.adapters[ak]->scale());
  }
  std::array<torch::Tensor, 3>& rows = segs.batch_rows[g.segments];
  if (!rows[0].defined()) {
    std::vector<int64_t> gather, kept, dest;
    gather.reserve(size_t(G * L));
    for (int64_t k = 0; k < G; ++k) {
      const size_t s = g.segments[size_t(k)];
      const int64_t first = segs.start[s], n = lengths[s];
      for (int64_t i = 0; i < L; ++i) gather.push_back(first + std::min(i, n - 1));
      for (int64_t i = 0; i < n; ++i) {
        kept.push_back(k * L + i);
        dest.push_back(first + i);
      }
    }
    auto index = [&](const std::vector<int64_t>& v) {
      return torch::tensor(v, torch::kInt64).to(x.device());
    };
    rows = {index(gather), index(kept), index(dest)};
  }
  const auto& [gather, kept, dest] = rows;
  auto xg = x.index_select(0, gather).view({G, L, x.size(1)});
  auto shrunk = torch::bmm(xg, torch::stack(a).transpose(1, 2));  // [G, L, r]
  auto scales = torch::tensor(scale, x.options().requires_grad(false)).view({G, 1, 1});
  auto delta = (torch::bmm(shrunk, torch::stack(bt)) * scales).view({G * L, out.size(1)});
  return out.index_add(0, dest, delta.index_select(0, kept));
}

// With autograd, in LibTorch ops: a CUDA device's training path (and the CPU's with
// libtorch_ops; the CPU otherwise runs WithKernelGrad, which on bench_train_step's 32 tenants of
// 4 rows of 8 tokens took 119 ms a step against this path's 153 ms).
torch::Tensor WithAutograd(const torch::Tensor& x, const torch::Tensor& y, int layer, LoraTarget t,
                           const LoraSegments& segs) {
  std::vector<int64_t> lengths;
  for (size_t s = 0; s < segs.adapter.size(); ++s)
    lengths.push_back(segs.start[s + 1] - segs.start[s]);
  const std::vector<SegmentGroup> groups = GroupSegments(segs, lengths, t);
  // A segment alone in its group: its own two products (fewer ops than a batch of one).
  // split, not one narrow per segment: a narrow's backward fills a zero tensor the size of the
  // whole input, so with many tenants the backward grew with segments x rows (measured: a
  // 32-tenant step took ~6x the time of 32 single-tenant steps); split's backward is one cat.
  // Segments in groups of several go through BatchedDelta: per segment, the loop's forward and
  // backward are about a dozen LibTorch ops per adapted projection (bench_train_step, 32 tenants
  // of 4 rows of 8 tokens on the 2-core machine: 188 ms a step in the loop, 138 ms batched).
  torch::Tensor out = y;
  bool any_alone = false;
  for (const SegmentGroup& g : groups) any_alone = any_alone || g.segments.size() == 1;
  if (any_alone) {
    const std::vector<torch::Tensor> x_parts = x.split_with_sizes(lengths, 0);
    std::vector<torch::Tensor> pieces = y.split_with_sizes(lengths, 0);
    for (const SegmentGroup& g : groups) {
      if (g.segments.size() != 1) continue;
      const size_t s = g.segments[0], k = size_t(segs.adapter[s]);
      pieces[s] = pieces[s] + torch::matmul(torch::matmul(x_parts[s], AOf(segs, k, layer, t).t()),
                                            BTOf(segs, k, layer, t)) *
                                  segs.adapters[k]->scale();
    }
    out = torch::cat(pieces, 0);
  }
  for (const SegmentGroup& g : groups)
    if (g.segments.size() > 1) out = BatchedDelta(x, out, layer, t, segs, lengths, g);
  return out;
}

// The CPU training path: the segments' adapters (each once) and one SegmentedLoraDelta.
torch::Tensor WithKernelGrad(const torch::Tensor& x, const torch::Tensor& y, int layer,
                             LoraTarget t, const LoraSegments& segs) {
  std::vector<torch::Tensor> a, bt;
  std::vector<float> scale;
  std::vector<int32_t> used(segs.adapters.size(), -1), seg_adapter;
  for (size_t s = 0; s < segs.adapter.size(); ++s) {
    if (segs.start[s + 1] == segs.start[s] || !Uses(segs, s, t)) {
      seg_adapter.push_back(-1);
      continue;
    }
    const size_t k = size_t(segs.adapter[s]);
    if (used[k] < 0) {
      used[k] = int32_t(a.size());
      a.push_back(segs.views.empty() ? AOf(segs, k, layer, t) : segs.views[k]->APart(layer, t));
      bt.push_back(segs.views.empty() ? BTOf(segs, k, layer, t) : segs.views[k]->BTPart(layer, t));
      scale.push_back(segs.adapters[k]->scale());
    }
    seg_adapter.push_back(used[k]);
  }
  if (a.empty()) return y;  // no row of this batch adapts this projection
  return SegmentedLoraDelta(x, y, a, bt, scale, segs.start, seg_adapter);
}

torch::Tensor WithKernels(const torch::Tensor& x, const torch::Tensor& y, int layer, LoraTarget t,
                          const LoraSegments& segs) {
  auto x2 = x.contiguous();
  auto out = y.contiguous();
  std::vector<kernels::AdapterRef> refs(segs.adapters.size());
  std::vector<int32_t> seg_adapter(segs.adapter.size(), -1);
  int32_t max_rank = 0;
  bool single_rows = true;
  for (size_t s = 0; s < segs.adapter.size(); ++s) {
    single_rows &= segs.start[s + 1] - segs.start[s] == 1;
    if (!Uses(segs, s, t)) continue;
    const size_t k = size_t(segs.adapter[s]);
    const LoraAdapter* ad = segs.adapters[k];
    refs[k] = {ad->APtr(layer, t), ad->BTPtr(layer, t), int32_t(ad->layout().rank), ad->scale()};
    max_rank = std::max(max_rank, refs[k].rank);
    seg_adapter[s] = int32_t(k);
  }
  if (max_rank == 0) return y;  // no row of this batch adapts this projection
  const kernels::LoraProblem p =
      kernels::PackedLoraProblem(int32_t(x2.size(0)), int32_t(x2.size(1)), int32_t(out.size(1)),
                                 refs.data(), int32_t(refs.size()), max_rank);
  auto shrunk = torch::empty({x2.size(0), max_rank});
  if (single_rows && int64_t(seg_adapter.size()) == x2.size(0)) {
    kernels::BgmvShrink(p, seg_adapter.data(), x2.data_ptr<float>(), shrunk.data_ptr<float>());
    kernels::BgmvExpand(p, seg_adapter.data(), shrunk.data_ptr<float>(), out.data_ptr<float>());
  } else {
    kernels::RowSegments rs{segs.start.data(), seg_adapter.data(), int32_t(seg_adapter.size())};
    kernels::SgmvShrink(p, rs, x2.data_ptr<float>(), shrunk.data_ptr<float>());
    kernels::SgmvExpand(p, rs, shrunk.data_ptr<float>(), out.data_ptr<float>());
  }
  return out;
}

// A pool's stacks with LibTorch ops, segment by segment: what the CUDA kernels compute, for a
// pool on the CPU (tests of the pool's routing; the CPU rollout uses WithKernels).
torch::Tensor WithPool(const torch::Tensor& x, const torch::Tensor& y, int layer, LoraTarget t,
                       const LoraSegments& segs) {
  const LoraPool& pool = *segs.pool;
  auto out = y.clone();
  for (size_t s = 0; s < segs.adapter.size(); ++s) {
    const int32_t k = segs.adapter[s], n = segs.start[s + 1] - segs.start[s];
    if (k < 0 || k >= pool.slots() || n == 0) continue;
    auto rows = out.narrow(0, segs.start[s], n);
    rows += torch::matmul(torch::matmul(x.narrow(0, segs.start[s], n), pool.A(layer, t)[k].t()),
                          pool.BT(layer, t)[k]) *
            pool.scale()[k];
  }
  return out;
}

}  // namespace

void LoraSegments::SetPoolSegments(const LoraPool* p) {
  pool = p;
  device_start = torch::tensor(start, torch::kInt32).to(p->device());
  device_adapter = torch::tensor(adapter, torch::kInt32).to(p->device());
}

LoraSegments LoraSegments::Uniform(std::vector<const LoraAdapter*> adapters,
                                   const std::vector<int32_t>& adapter_per_block,
                                   int32_t rows_each) {
  LoraSegments s;
  s.adapters = std::move(adapters);
  s.start.push_back(0);
  for (int32_t k : adapter_per_block) {
    // Consecutive blocks of one adapter are one segment: a segment costs a few ops whatever its
    // rows, and one per block made a 256-row single-tenant training step ~20k small ops.
    if (!s.adapter.empty() && s.adapter.back() == k) {
      s.start.back() += rows_each;
      continue;
    }
    s.adapter.push_back(k);
    s.start.push_back(s.start.back() + rows_each);
  }
  return s;
}

torch::Tensor AddLoraDelta(const torch::Tensor& x, const torch::Tensor& y, int layer,
                           LoraTarget target, const LoraSegments& segs) {
  TORCH_CHECK(x.dim() == 2 && y.dim() == 2 && x.size(0) == y.size(0), "rows of x and y differ");
  TORCH_CHECK(segs.start.size() == segs.adapter.size() + 1 && segs.start.back() == x.size(0),
              "LoRA segments must cover every row");
  if (segs.pool != nullptr) {
    TORCH_CHECK(!torch::GradMode::is_enabled(), "a LoraPool is for generation: disable autograd");
    TORCH_CHECK(x.device() == segs.pool->device(), "LoRA pool and activations on other devices");
    if (!x.is_cuda()) return WithPool(x, y, layer, target, segs);
#if MARLAAS_HAVE_CUDA
    return AddLoraDeltaCuda(x, y, layer, target, segs);
#else
    TORCH_CHECK(false, "LoRA pool forward on a CUDA device needs a build with CUDA");
#endif
  }
  for (int32_t k : segs.adapter) {
    TORCH_CHECK(k < int32_t(segs.adapters.size()), "LoRA adapter index out of range");
  }
  if (torch::GradMode::is_enabled() && x.is_cpu() && x.scalar_type() == torch::kFloat32 &&
      !segs.libtorch_ops)
    return WithKernelGrad(x, y, layer, target, segs);
  if (torch::GradMode::is_enabled() || !x.is_cpu()) return WithAutograd(x, y, layer, target, segs);
  return WithKernels(x, y, layer, target, segs);
}

}  // namespace marlaas::model

#include "model/lora_apply.h"

#include "kernels/lora_ops.h"

namespace marlaas::model {
namespace {

torch::Tensor WithAutograd(const torch::Tensor& x, torch::Tensor y, int layer, LoraTarget t,
                           const LoraRouting& lora) {
  for (size_t k = 0; k < lora.adapters.size(); ++k) {
    const LoraAdapter* ad = lora.adapters[k];
    if (ad == nullptr || !ad->has(t)) continue;
    std::vector<int64_t> rows;
    for (size_t b = 0; b < lora.row_adapter.size(); ++b) {
      if (lora.row_adapter[b] == int32_t(k)) rows.push_back(int64_t(b));
    }
    if (rows.empty()) continue;
    auto idx = torch::tensor(rows, torch::kInt64);
    auto xk = x.index_select(0, idx);
    auto delta =
        torch::matmul(torch::matmul(xk, ad->A(layer, t).t()), ad->B(layer, t).t()) * ad->scale();
    y = y.index_add(0, idx, delta);
  }
  return y;
}

torch::Tensor WithKernels(const torch::Tensor& x, torch::Tensor y, int layer, LoraTarget t,
                          const LoraRouting& lora) {
  const int64_t B = x.size(0), T = x.size(1), in = x.size(2), out = y.size(2);
  auto x2 = x.reshape({B * T, in}).contiguous();
  auto y2 = y.reshape({B * T, out}).contiguous();
  std::vector<kernels::AdapterRef> refs(lora.adapters.size());
  int32_t max_rank = 1;
  for (size_t k = 0; k < lora.adapters.size(); ++k) {
    const LoraAdapter* ad = lora.adapters[k];
    if (ad == nullptr || !ad->has(t)) continue;  // refs[k].rank stays 0: skipped below
    refs[k] = {ad->A(layer, t).data_ptr<float>(), ad->B(layer, t).data_ptr<float>(),
               int32_t(ad->layout().rank), ad->scale()};
    max_rank = std::max(max_rank, refs[k].rank);
  }
  // Contiguous runs of rows with the same adapter become one segment each.
  std::vector<int32_t> start = {0}, adapter;
  for (int64_t b = 0; b < B; ++b) {
    int32_t k = lora.row_adapter[size_t(b)];
    if (k >= 0 && refs[size_t(k)].rank == 0) k = -1;
    if (!adapter.empty() && adapter.back() == k) {
      start.back() = int32_t((b + 1) * T);
    } else {
      adapter.push_back(k);
      start.push_back(int32_t((b + 1) * T));
    }
  }
  kernels::LoraProblem p;
  p.rows = int32_t(B * T);
  p.in_dim = int32_t(in);
  p.out_dim = int32_t(out);
  p.adapters = refs.data();
  p.num_adapters = int32_t(refs.size());
  p.x_stride = in;
  p.y_stride = max_rank;
  p.out_stride = out;
  kernels::RowSegments segs{start.data(), adapter.data(), int32_t(adapter.size())};
  auto shrunk = torch::empty({B * T, max_rank});
  kernels::SgmvShrink(p, segs, x2.data_ptr<float>(), shrunk.data_ptr<float>());
  kernels::SgmvExpand(p, segs, shrunk.data_ptr<float>(), y2.data_ptr<float>());
  return y2.view({B, T, out});
}

}  // namespace

torch::Tensor AddLoraDelta(const torch::Tensor& x, const torch::Tensor& y, int layer,
                           LoraTarget target, const LoraRouting& lora) {
  TORCH_CHECK(int64_t(lora.row_adapter.size()) == x.size(0), "one adapter index per batch row");
  for (int32_t k : lora.row_adapter) {
    TORCH_CHECK(k < int32_t(lora.adapters.size()), "row adapter index out of range");
  }
  if (torch::GradMode::is_enabled()) return WithAutograd(x, y, layer, target, lora);
  return WithKernels(x, y, layer, target, lora);
}

}  // namespace marlaas::model

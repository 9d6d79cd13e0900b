#include "model/lora_grad.h"

#include <algorithm>

#include "kernels/lora_ops.h"

namespace marlaas::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// The adapters' kernel views, with A and Bᵀ swapped when `swapped` (the backward's g·B is a shrink
// by Bᵀ, and dx the expand of that by A).
std::vector<kernels::AdapterRef> Refs(const tensor_list& a, const tensor_list& bt,
                                      const std::vector<int32_t>& rank,
                                      const std::vector<double>& scale, bool swapped) {
  std::vector<kernels::AdapterRef> refs;
  for (size_t j = 0; j < a.size(); ++j) {
    const float* pa = a[j].data_ptr<float>();
    const float* pbt = bt[j].data_ptr<float>();
    refs.push_back({swapped ? pbt : pa, swapped ? pa : pbt, rank[j], float(scale[j])});
  }
  return refs;
}

// Each adapter's rank: A holds rank·in values, whatever its shape.
std::vector<int32_t> Ranks(const tensor_list& a, int64_t in) {
  std::vector<int32_t> r;
  for (const auto& t : a) r.push_back(int32_t(t.numel() / in));
  return r;
}

class SegmentedLoraFn : public torch::autograd::Function<SegmentedLoraFn> {
 public:
  // a and bt are contiguous (SegmentedLoraDelta makes them so); start/adapter/scale as checked.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& y,
                               at::TensorList a, at::TensorList bt, std::vector<int64_t> start,
                               std::vector<int64_t> adapter, std::vector<double> scale) {
    auto xc = x.contiguous();
    // y in place when nothing else can see it change (a projection's fresh output); a leaf that
    // requires grad or a view is copied. Autograd's version counter refuses the backward of any
    // other op that saved y (none of the model's do).
    const bool in_place = y.is_contiguous() && !y.is_view() && !(y.is_leaf() && y.requires_grad());
    auto out = in_place ? y : y.clone(at::MemoryFormat::Contiguous);
    if (in_place) ctx->mark_dirty({y});
    const tensor_list av(a.begin(), a.end()), btv(bt.begin(), bt.end());
    const std::vector<int32_t> st(start.begin(), start.end()), ad(adapter.begin(), adapter.end());
    const std::vector<int32_t> rank = Ranks(av, xc.size(1));
    const std::vector<kernels::AdapterRef> refs = Refs(av, btv, rank, scale, false);
    const int32_t max_rank = *std::max_element(rank.begin(), rank.end());
    auto shrunk = torch::zeros({xc.size(0), max_rank}, xc.options());
    const kernels::LoraProblem p =
        kernels::PackedLoraProblem(int32_t(xc.size(0)), int32_t(xc.size(1)), int32_t(out.size(1)),
                                   refs.data(), int32_t(refs.size()), max_rank);
    const kernels::RowSegments segs{st.data(), ad.data(), int32_t(ad.size())};
    kernels::SgmvShrink(p, segs, xc.data_ptr<float>(), shrunk.data_ptr<float>());
    kernels::SgmvExpand(p, segs, shrunk.data_ptr<float>(), out.data_ptr<float>());
    tensor_list saved = {xc, shrunk};
    saved.insert(saved.end(), av.begin(), av.end());
    saved.insert(saved.end(), btv.begin(), btv.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["start"] = std::move(start);
    ctx->saved_data["adapter"] = std::move(adapter);
    ctx->saved_data["scale"] = std::move(scale);
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const tensor_list saved = ctx->get_saved_variables();
    const auto& xc = saved[0];
    const auto& shrunk = saved[1];
    const size_t n = (saved.size() - 2) / 2;
    const tensor_list a(saved.begin() + 2, saved.begin() + 2 + long(n));
    const tensor_list bt(saved.begin() + 2 + long(n), saved.end());
    const std::vector<int64_t> start = ctx->saved_data["start"].toIntVector();
    const std::vector<int64_t> adapter = ctx->saved_data["adapter"].toIntVector();
    const std::vector<double> scale = ctx->saved_data["scale"].toDoubleVector();
    const std::vector<int32_t> st(start.begin(), start.end()), ad(adapter.begin(), adapter.end());
    const kernels::RowSegments segs{st.data(), ad.data(), int32_t(ad.size())};
    auto g = grads[0].contiguous();
    const int32_t rows = int32_t(xc.size(0)), in = int32_t(xc.size(1)), out = int32_t(g.size(1));
    const int32_t max_rank = int32_t(shrunk.size(1));

    // gb = g·B per row (unscaled): the shrink of g by Bᵀ.
    const std::vector<kernels::AdapterRef> swapped = Refs(a, bt, Ranks(a, in), scale, true);
    auto gb = torch::zeros({rows, max_rank}, g.options());
    const kernels::LoraProblem p = kernels::PackedLoraProblem(rows, out, in, swapped.data(),
                                                              int32_t(swapped.size()), max_rank);
    kernels::SgmvShrink(p, segs, g.data_ptr<float>(), gb.data_ptr<float>());
    // dx = scale·gb·A: the expand of gb by A.
    torch::Tensor dx;
    if (ctx->needs_input_grad(0)) {
      dx = torch::zeros({rows, in}, g.options());
      kernels::SgmvExpand(p, segs, gb.data_ptr<float>(), dx.data_ptr<float>());
    }
    // dA[j] = scale·Σ gbᵀ·x and dBᵀ[j] = scale·Σ shrunkᵀ·g over adapter j's rows.
    // All of them in one zeroed buffer, each a tensor over its part that keeps the buffer alive
    // (with 32 tenants, two zeros_like per adapter were ~10% of the op's backward).
    int64_t total = 0;
    for (size_t j = 0; j < n; ++j) total += a[j].numel() + bt[j].numel();
    auto buffer = torch::zeros({total}, g.options());
    float* next = buffer.data_ptr<float>();
    auto part = [&](const torch::Tensor& like) {
      float* at = next;
      next += like.numel();
      return torch::from_blob(
          at, like.sizes(), [buffer](void*) {}, g.options());
    };
    tensor_list da(n), dbt(n);
    std::vector<float*> da_ptr(n), dbt_ptr(n);
    for (size_t j = 0; j < n; ++j) {
      da[j] = part(a[j]);
      dbt[j] = part(bt[j]);
      da_ptr[j] = da[j].data_ptr<float>();
      dbt_ptr[j] = dbt[j].data_ptr<float>();
    }
    kernels::WeightGradProblem w;
    w.adapters = swapped.data();  // only ranks and scales are read
    w.num_adapters = int32_t(n);
    w.left_stride = max_rank;
    w.width = in;
    w.right_stride = in;
    kernels::SgmvWeightGrad(w, segs, gb.data_ptr<float>(), xc.data_ptr<float>(), da_ptr.data());
    w.width = out;
    w.right_stride = out;
    kernels::SgmvWeightGrad(w, segs, shrunk.data_ptr<float>(), g.data_ptr<float>(), dbt_ptr.data());

    tensor_list result = {dx, ctx->needs_input_grad(1) ? g : torch::Tensor()};
    result.insert(result.end(), da.begin(), da.end());
    result.insert(result.end(), dbt.begin(), dbt.end());
    result.resize(result.size() + 3);  // start, adapter, scale: not tensors
    return result;
  }
};

}  // namespace

torch::Tensor SegmentedLoraDelta(const torch::Tensor& x, const torch::Tensor& y,
                                 const std::vector<torch::Tensor>& a,
                                 const std::vector<torch::Tensor>& bt,
                                 const std::vector<float>& scale, const std::vector<int32_t>& start,
                                 const std::vector<int32_t>& adapter) {
  auto f32_cpu = [](const torch::Tensor& t) {
    return t.defined() && t.is_cpu() && t.scalar_type() == torch::kFloat32;
  };
  TORCH_CHECK(f32_cpu(x) && f32_cpu(y), "SegmentedLoraDelta: x and y must be f32 CPU tensors");
  TORCH_CHECK(x.dim() == 2 && y.dim() == 2 && x.size(0) == y.size(0),
              "SegmentedLoraDelta: x [N, in] and y [N, out] must have the same rows");
  TORCH_CHECK(a.size() == bt.size() && a.size() == scale.size(),
              "SegmentedLoraDelta: a, bt and scale must have one entry per adapter");
  TORCH_CHECK(start.size() == adapter.size() + 1 && start.front() == 0 && start.back() == x.size(0),
              "SegmentedLoraDelta: segments must start at row 0 and end at the last row");
  std::vector<torch::Tensor> ac, btc;
  for (size_t j = 0; j < a.size(); ++j) {
    TORCH_CHECK(f32_cpu(a[j]) && f32_cpu(bt[j]), "SegmentedLoraDelta: adapter ", j,
                ": A and Bᵀ must be f32 CPU tensors");
    const int64_t rank = a[j].numel() / std::max<int64_t>(1, x.size(1));
    const bool flat = a[j].dim() == 1 && bt[j].dim() == 1 && a[j].numel() == rank * x.size(1) &&
                      bt[j].numel() == rank * y.size(1);
    const bool matrices = a[j].dim() == 2 && a[j].size(1) == x.size(1) && bt[j].dim() == 2 &&
                          bt[j].size(1) == y.size(1) && a[j].size(0) == bt[j].size(0);
    TORCH_CHECK(flat || matrices, "SegmentedLoraDelta: adapter ", j,
                ": A must be [rank, in] and Bᵀ [rank, out] (or both flat)");
    TORCH_CHECK(rank >= 1 && rank <= kernels::kMaxLoraRank, "SegmentedLoraDelta: adapter ", j,
                ": rank ", rank, " out of range");
    ac.push_back(a[j].contiguous());
    btc.push_back(bt[j].contiguous());
  }
  for (size_t s = 0; s < adapter.size(); ++s) {
    TORCH_CHECK(start[s] <= start[s + 1], "SegmentedLoraDelta: segment ", s,
                " ends before it starts");
    TORCH_CHECK(adapter[s] >= -1 && adapter[s] < int32_t(a.size()), "SegmentedLoraDelta: segment ",
                s, ": adapter ", adapter[s], " out of range");
  }
  return SegmentedLoraFn::apply(x, y, at::TensorList(ac), at::TensorList(btc),
                                std::vector<int64_t>(start.begin(), start.end()),
                                std::vector<int64_t>(adapter.begin(), adapter.end()),
                                std::vector<double>(scale.begin(), scale.end()));
}

}  // namespace marlaas::model

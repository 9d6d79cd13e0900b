#include "model/attention.h"

#include <limits>

#include "kernels/attention_ops.h"

namespace marlaas::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

kernels::AttentionProblem ProblemOf(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& masked, double scale) {
  kernels::AttentionProblem p;
  p.rows = int32_t(q.size(0));
  p.heads = int32_t(q.size(1));
  p.q_len = int32_t(q.size(2));
  p.head_dim = int32_t(q.size(3));
  p.kv_heads = int32_t(k.size(1));
  p.kv_len = int32_t(k.size(2));
  p.scale = float(scale);
  p.masked = masked.data_ptr<bool>();
  p.mask_per_row = masked.size(0) > 1;
  return p;
}

class AttentionFn : public torch::autograd::Function<AttentionFn> {
 public:
  // Inputs as Attend checked them; masked [1 or R, T, S] contiguous.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& masked, double scale) {
    auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
    auto out = torch::empty_like(qc);
    auto probs = torch::empty({q.size(0), q.size(1), q.size(2), k.size(2)}, qc.options());
    kernels::AttentionForward(ProblemOf(qc, kc, masked, scale), qc.data_ptr<float>(),
                              kc.data_ptr<float>(), vc.data_ptr<float>(), out.data_ptr<float>(),
                              probs.data_ptr<float>());
    ctx->save_for_backward({qc, kc, vc, masked, probs});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const tensor_list s = ctx->get_saved_variables();
    const auto &q = s[0], &k = s[1], &v = s[2], &masked = s[3], &probs = s[4];
    auto g = grads[0].contiguous();
    auto dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
    kernels::AttentionBackward(ProblemOf(q, k, masked, ctx->saved_data["scale"].toDouble()),
                               q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                               probs.data_ptr<float>(), g.data_ptr<float>(), dq.data_ptr<float>(),
                               dk.data_ptr<float>(), dv.data_ptr<float>());
    return {dq, dk, dv, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor AttendWithLibTorch(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& masked,
                                 double scale) {
  // The `group` query heads of a key head (head = kv * group + g) stacked along time: no copy of
  // the keys and values per query head.
  const int64_t R = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t KV = k.size(1), S = k.size(2), group = H / KV;
  auto scores =
      torch::matmul(q.reshape({R, KV, group * T, D}), k.transpose(-2, -1)).view({R, H, T, S}) *
      scale;
  auto weights =
      torch::softmax(scores.masked_fill(masked, -std::numeric_limits<float>::infinity()), -1);
  return torch::matmul(weights.view({R, KV, group * T, S}), v).view({R, H, T, D});
}

torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& masked, double scale) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "Attend: q, k and v must be [rows, heads, time, head_dim]");
  TORCH_CHECK(k.sizes() == v.sizes(), "Attend: k and v must have the same shape");
  TORCH_CHECK(k.size(0) == q.size(0) && k.size(3) == q.size(3),
              "Attend: k must have q's rows and head_dim");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "Attend: query heads must be a multiple of key/value heads");
  TORCH_CHECK(masked.scalar_type() == torch::kBool && masked.dim() == 4 &&
                  (masked.size(0) == 1 || masked.size(0) == q.size(0)) && masked.size(1) == 1 &&
                  masked.size(2) == q.size(2) && masked.size(3) == k.size(2),
              "Attend: masked must be bool [1 or rows, 1, q time, kv time]");
  const bool kernel = q.is_cpu() && q.scalar_type() == torch::kFloat32 &&
                      k.scalar_type() == torch::kFloat32 && v.scalar_type() == torch::kFloat32;
  if (!kernel) return AttendWithLibTorch(q, k, v, masked, scale);
  return AttentionFn::apply(q, k, v, masked.squeeze(1).contiguous(), scale);
}

}  // namespace marlaas::model

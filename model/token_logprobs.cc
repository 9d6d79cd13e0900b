#include "model/token_logprobs.h"

#include "kernels/logprob_ops.h"
#if MARLAAS_HAVE_CUDA
#include "kernels/cuda/logprob_cuda.h"
#include "model/cuda_tensor_ref.h"
#endif

namespace marlaas::model {
namespace {

class TokenLogprobsFn : public torch::autograd::Function<TokenLogprobsFn> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, double temperature) {
    TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == torch::kFloat32,
                "logits must be [N, vocab] f32");
    TORCH_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), "one target per row");
    auto l = logits.contiguous();
    auto t = targets.to(l.device(), torch::kInt32).contiguous();
    TORCH_CHECK(t.numel() == 0 ||
                    (t.min().item<int32_t>() >= 0 && t.max().item<int32_t>() < int32_t(l.size(1))),
                "target token out of range");
    auto out = torch::empty({l.size(0)}, l.options());
    auto lse = torch::empty({l.size(0)}, l.options());
    if (l.is_cuda()) {
#if MARLAAS_HAVE_CUDA
      CheckDefaultStream(l.device());
      CheckLaunch(kernels::cuda::TokenLogprobs(RefOf(l), RefOf(t), float(1.0 / temperature),
                                               RefOf(out), RefOf(lse), /*stream=*/nullptr));
#else
      TORCH_CHECK(false, "TokenLogprobs on a CUDA device needs a build with CUDA");
#endif
    } else {
      kernels::LogprobProblem p{int32_t(l.size(0)), int32_t(l.size(1)), l.size(1),
                                float(1.0 / temperature)};
      kernels::TokenLogprobs(p, l.data_ptr<float>(), t.data_ptr<int32_t>(), out.data_ptr<float>(),
                             lse.data_ptr<float>());
    }
    ctx->save_for_backward({l, t, lse});
    ctx->saved_data["inv_t"] = 1.0 / temperature;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto l = saved[0], t = saved[1], lse = saved[2];
    auto g = grads[0].contiguous();
    auto dl = torch::empty_like(l);
    const float inv_t = float(ctx->saved_data["inv_t"].toDouble());
    if (l.is_cuda()) {
#if MARLAAS_HAVE_CUDA
      CheckLaunch(kernels::cuda::TokenLogprobsBackward(RefOf(l), RefOf(t), inv_t, RefOf(lse),
                                                       RefOf(g), RefOf(dl), /*stream=*/nullptr));
#else
      TORCH_CHECK(false, "TokenLogprobs on a CUDA device needs a build with CUDA");
#endif
    } else {
      kernels::LogprobProblem p{int32_t(l.size(0)), int32_t(l.size(1)), l.size(1), inv_t};
      kernels::TokenLogprobsBackward(p, l.data_ptr<float>(), t.data_ptr<int32_t>(),
                                     lse.data_ptr<float>(), g.data_ptr<float>(),
                                     dl.data_ptr<float>());
    }
    return {dl, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor TokenLogprobs(const torch::Tensor& logits, const torch::Tensor& targets,
                            float temperature) {
  return TokenLogprobsFn::apply(logits, targets, double(temperature));
}

}  // namespace marlaas::model

#include "model/lora_apply_cuda.h"

#include "kernels/cuda/lora_cuda.h"
#include "model/cuda_tensor_ref.h"
#include "model/lora_pool.h"

namespace marlaas::model {

torch::Tensor AddLoraDeltaCuda(const torch::Tensor& x, const torch::Tensor& y, int layer,
                               LoraTarget target, const LoraSegments& segs) {
  namespace kc = kernels::cuda;
  const LoraPool& pool = *segs.pool;
  TORCH_CHECK(segs.device_start.defined() && segs.device_adapter.defined(),
              "LoRA pool segments were not set (SetPoolSegments)");
  CheckDefaultStream(x.device());
  auto x2 = x.contiguous();
  auto out = y.contiguous();
  auto shrunk = torch::empty({x2.size(0), int64_t(pool.max_rank())}, x2.options());
  kc::LoraStack stack{RefOf(pool.A(layer, target)), RefOf(pool.BT(layer, target)),
                      RefOf(pool.scale())};
  const kc::TensorRef xr = RefOf(x2), yr = RefOf(shrunk), outr = RefOf(out);
  const kc::TensorRef adapter = RefOf(segs.device_adapter);
  const bool single_rows = int64_t(segs.adapter.size()) == x2.size(0);
  if (single_rows) {
    CheckLaunch(kc::BgmvShrink(xr, stack, adapter, yr, /*stream=*/nullptr));
    CheckLaunch(kc::BgmvExpand(yr, stack, adapter, outr, nullptr));
  } else {
    const kc::TensorRef start = RefOf(segs.device_start);
    CheckLaunch(kc::SgmvShrink(xr, stack, start, adapter, yr, nullptr));
    CheckLaunch(kc::SgmvExpand(yr, stack, start, adapter, outr, nullptr));
  }
  return out;
}

}  // namespace marlaas::model

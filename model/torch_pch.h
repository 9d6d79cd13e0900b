// The precompiled header for every target that uses LibTorch: <torch/torch.h> costs ~20 s of
// parsing per translation unit on these machines, so it is parsed once per target.
#pragma once

#include <torch/torch.h>

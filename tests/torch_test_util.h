// Helpers shared by the tests of LibTorch code (header only: test_util links no LibTorch).
#pragma once

#include <string>

#include "model/torch_pch.h"

namespace marlaas::testing {

// The largest |a - b| over all elements.
inline double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// The message (without backtrace) of the c10::Error that f() throws, or "" when it throws none.
template <typename F>
std::string TorchErrorOf(F f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

}  // namespace marlaas::testing

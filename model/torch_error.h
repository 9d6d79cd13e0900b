// The text of an exception that LibTorch may have thrown, without the C++ backtrace a c10::Error
// carries in what(): hundreds of "frame #N" lines that buried the cause (an allocation of N
// bytes that failed, a shape that did not match) in a tenant's status and log.
#pragma once

#include <exception>
#include <string>

#include "model/torch_pch.h"

namespace marlaas::model {

inline std::string TorchErrorText(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

}  // namespace marlaas::model

// The text of an exception that LibTorch may have thrown, without the C++ backtrace a c10::Error
// carries in what(): hundreds of "frame #N" lines that buried the cause (an allocation of N
// bytes that failed, a shape that did not match) in a tenant's status and log.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "model/torch_pch.h"

namespace marlaas::model {

inline std::string TorchErrorText(const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return c->what_without_backtrace();
  return e.what();
}

// Its first line: enough for a log line or a tenant's reason.
inline std::string TorchErrorLine(const std::exception& e) {
  const std::string text = TorchErrorText(e);
  return text.substr(0, text.find('\n'));
}

// Whether `e` says memory ran out (std::bad_alloc; LibTorch's CPU allocator: "can't allocate
// memory"; CUDA: "out of memory"): a condition of the moment, not of the input.
inline bool IsOutOfMemory(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  const std::string text = TorchErrorText(e);
  return text.find("can't allocate memory") != std::string::npos ||
         text.find("out of memory") != std::string::npos;
}

}  // namespace marlaas::model

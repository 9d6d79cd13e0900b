// What isolation this host allows, found by trying each layer in a throw-away child process.
// The verifier refuses untrusted work when a required layer is missing unless the operator
// passes --allow-weak-sandbox. Thread-compatible.
#pragma once

#include <string>
#include <vector>

namespace marlaas::sandbox {

struct IsolationLayer {
  std::string name;  // "user namespace", "seccomp-bpf", ...
  bool available = false;
  bool required = true;  // the sandbox cannot run untrusted code safely without it
  std::string detail;    // why not, when unavailable
};

std::vector<IsolationLayer> ProbeIsolation();
// True when every required layer is available.
bool StrongIsolation(const std::vector<IsolationLayer>& layers);

}  // namespace marlaas::sandbox

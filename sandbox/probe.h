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

// The verifier's decision on a host with these layers. All required ones there: nothing to say.
// One missing: `refuse` names the missing layers (untrusted work then fails with it), unless
// allow_weak, where `refuse` is empty and `warning` names them for a loud log line.
struct IsolationPolicy {
  std::string refuse;
  std::string warning;
};
IsolationPolicy DecideIsolationPolicy(const std::vector<IsolationLayer>& layers, bool allow_weak);

}  // namespace marlaas::sandbox

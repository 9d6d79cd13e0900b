#include "base/device_name.h"

namespace marlaas {

Result<int> ParseDeviceName(const std::string& name) {
  if (name == "cpu") return -1;
  if (name == "cuda") return 0;
  const std::string prefix = "cuda:";
  const std::string digits = name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : "";
  if (digits.empty() || digits.size() > 3 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return Status(StatusCode::kInvalidArgument,
                  "device '" + name + "' is not one of cpu, cuda, cuda:N");
  }
  return std::stoi(digits);
}

}  // namespace marlaas

#include "base/host_memory.h"

#include <fstream>
#include <sstream>

#include "base/cgroup_hierarchy.h"

namespace marlaas {
namespace {

std::string ReadSmall(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

std::optional<uint64_t> MemTotalBytes(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("MemTotal:", 0) != 0) continue;
    std::istringstream f(line.substr(9));
    uint64_t kib = 0;
    std::string unit;
    if (!(f >> kib >> unit) || unit != "kB" || kib == 0) return std::nullopt;
    return kib * 1024;
  }
  return std::nullopt;
}

std::optional<uint64_t> CgroupLimitBytes(const std::string& text) {
  std::istringstream f(text);
  std::string word;
  if (!(f >> word) || word == "max") return std::nullopt;
  if (word.find_first_not_of("0123456789") != std::string::npos || word.size() > 19)
    return std::nullopt;
  const uint64_t v = std::stoull(word);
  if (v == 0 || v >= (uint64_t(1) << 62)) return std::nullopt;  // v1's "unlimited" is ~2^63
  return v;
}

HostMemory UsableHostMemory() {
  HostMemory out;
  if (auto total = MemTotalBytes(ReadSmall("/proc/meminfo"))) {
    out.bytes = *total;
    out.limited_by = "RAM";
  }
  // The own cgroup and each above it, up to the mount (a container's root included).
  auto walk = [&](const std::string& controller, const char* file) {
    CgroupHierarchy h;
    if (!FindCgroupHierarchy(controller, &h)) return;
    for (std::string dir = h.own_dir;;) {
      const std::string path = dir + "/" + file;
      if (auto limit = CgroupLimitBytes(ReadSmall(path));
          limit && (!out.bytes || *limit < out.bytes)) {
        out.bytes = *limit;
        out.limited_by = path;
      }
      if (dir.size() <= h.mount.size()) break;
      dir = dir.substr(0, dir.rfind('/'));
    }
  };
  walk("", "memory.max");
  walk("memory", "memory.limit_in_bytes");
  return out;
}

}  // namespace marlaas

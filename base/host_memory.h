// How much memory this process may use on this host: the smaller of the machine's RAM
// (/proc/meminfo MemTotal) and the memory limits of its cgroup and the cgroups above it (cgroup v2
// memory.max, v1 memory.limit_in_bytes), as a container or a systemd slice sets them.
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace marlaas {

struct HostMemory {
  uint64_t bytes = 0;      // 0 when even MemTotal could not be read
  std::string limited_by;  // "RAM" or the cgroup file that sets the limit
};

HostMemory UsableHostMemory();

// Parsing, apart for tests: MemTotal of /proc/meminfo's text in bytes; a cgroup memory limit file's
// value ("max", or a v1 "unlimited" near 2^63: nullopt).
std::optional<uint64_t> MemTotalBytes(const std::string& meminfo);
std::optional<uint64_t> CgroupLimitBytes(const std::string& text);

}  // namespace marlaas

// Where this process's cgroup is: the mounted cgroup hierarchy (cgroup v2, or the v1 hierarchy of
// one controller) and this process's own cgroup in it, as a directory. Read from
// /proc/self/mountinfo and /proc/self/cgroup; a container that mounts a sub-tree of the hierarchy
// is taken into account. Thread-safe.
#pragma once

#include <string>

namespace marlaas {

struct CgroupHierarchy {
  std::string mount;    // e.g. /sys/fs/cgroup
  std::string own_dir;  // this process's cgroup under `mount`
};

// `controller` "": the cgroup2 hierarchy; otherwise the v1 hierarchy carrying that controller.
// False when there is none.
bool FindCgroupHierarchy(const std::string& controller, CgroupHierarchy* out);

// Whether `word` is one of the `sep`-separated words of `text` (trailing spaces and newlines of
// each word ignored): "memory" in a controllers list.
bool HasListWord(const std::string& text, const std::string& word, char sep);

}  // namespace marlaas

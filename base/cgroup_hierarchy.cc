#include "base/cgroup_hierarchy.h"

#include <fstream>
#include <sstream>

namespace marlaas {

bool HasListWord(const std::string& text, const std::string& word, char sep) {
  std::stringstream s(text);
  std::string w;
  while (std::getline(s, w, sep)) {
    while (!w.empty() && (w.back() == '\n' || w.back() == ' ')) w.pop_back();
    if (w == word) return true;
  }
  return false;
}

bool FindCgroupHierarchy(const std::string& controller, CgroupHierarchy* out) {
  std::ifstream mountinfo("/proc/self/mountinfo");
  std::string line, mount_root;
  bool found = false;
  while (std::getline(mountinfo, line)) {
    std::istringstream f(line);
    std::string id, parent, dev, root, point, opts, field;
    f >> id >> parent >> dev >> root >> point >> opts;
    while (f >> field && field != "-") {
    }
    std::string fstype, source, super;
    f >> fstype >> source >> super;
    const bool match = controller.empty()
                           ? fstype == "cgroup2"
                           : fstype == "cgroup" && HasListWord(super, controller, ',');
    if (match) {
      out->mount = point;
      mount_root = root;
      found = true;
      break;
    }
  }
  if (!found) return false;
  std::ifstream cgroups("/proc/self/cgroup");
  while (std::getline(cgroups, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    const bool match = controller.empty() ? line.compare(0, a, "0") == 0
                                          : HasListWord(controllers, controller, ',');
    if (!match) continue;
    // A container may mount a sub-tree of the hierarchy: our path is relative to its root.
    if (mount_root != "/" && path.compare(0, mount_root.size(), mount_root) == 0)
      path = path.substr(mount_root.size());
    out->own_dir = out->mount + (path == "/" ? "" : path);
    return true;
  }
  return false;
}

}  // namespace marlaas

// QueryGpusInChild (gpu_info.h): forks, runs QueryGpus in the child and reads its answer from a
// pipe as lines: "why <text>" or "gpu <index> <memory_bytes> <major> <minor> <name>".
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "kernels/gpu_info.h"

namespace marlaas {

GpuInfo QueryGpusInChild() {
  GpuInfo info;
  int fds[2];
  if (::pipe(fds) != 0) {
    info.why_none = "cannot probe for GPUs: pipe failed";
    return info;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    info.why_none = "cannot probe for GPUs: fork failed";
    return info;
  }
  if (pid == 0) {
    ::close(fds[0]);
    const GpuInfo child = QueryGpus();
    std::string out = std::string("built ") + (child.built_with_cuda ? "1" : "0") + "\n";
    if (child.devices.empty()) out += "why " + child.why_none + "\n";
    for (const GpuDevice& d : child.devices) {
      out += "gpu " + std::to_string(d.index) + " " + std::to_string(d.memory_bytes) + " " +
             std::to_string(d.compute_major) + " " + std::to_string(d.compute_minor) + " " +
             d.name + "\n";
    }
    size_t off = 0;
    while (off < out.size()) {
      const ssize_t n = ::write(fds[1], out.data() + off, out.size() - off);
      if (n <= 0) break;
      off += size_t(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream f(line);
    std::string tag;
    f >> tag;
    if (tag == "built") {
      int b = 0;
      f >> b;
      info.built_with_cuda = b != 0;
    } else if (tag == "why") {
      std::getline(f >> std::ws, info.why_none);
    } else if (tag == "gpu") {
      GpuDevice d;
      f >> d.index >> d.memory_bytes >> d.compute_major >> d.compute_minor;
      std::getline(f >> std::ws, d.name);
      info.devices.push_back(d);
    }
  }
  if (info.devices.empty() && info.why_none.empty())
    info.why_none = "the GPU probe process failed (status " + std::to_string(status) + ")";
  return info;
}

}  // namespace marlaas

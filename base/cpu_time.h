// ProcessCpuNanos: CPU time this process has used, all its threads together (user and system);
// ThreadCpuNanos: the calling thread's alone. The stages time their work with them for the
// simulator's cost fit: unlike wall time, CPU time does not grow when other processes take the
// cores, so the fit describes the work and the simulator adds the sharing of cores itself.
#pragma once

#include <time.h>

#include <cstdint>

namespace marlaas {

inline int64_t ProcessCpuNanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

inline int64_t ThreadCpuNanos() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace marlaas

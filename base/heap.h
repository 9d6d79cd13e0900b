// KeepFreedHeapMemory: the process's allocator (glibc malloc) keeps the memory it frees for the
// next allocation instead of handing it back to the kernel.
//
// Why: a stage's work is periodic. A training step or a forward pass allocates its activations,
// frees them at the end, and allocates the same sizes again in the next one. With glibc's
// defaults the freed top of the heap is trimmed (returned with brk) once it exceeds 128 KiB and
// blocks above the dynamic mmap threshold are unmapped on free, so every step faults its memory
// in again: on the 2-core machine a 4-row training step of a fresh trainer took 3,000-5,000 minor
// page faults and 15-17 ms, and 0-300 faults and 10-11 ms once the heap was kept (2026-12-06).
//
// Afterwards blocks below 32 MiB (glibc's largest mmap threshold) come from the heap and freed
// heap memory stays mapped up to 1 GiB of free top: the process's resident size stays near its
// peak, which a long-running stage reaches within its first steps anyway. Larger blocks are still
// mapped and unmapped one by one (their page faults are small next to the work on them).
// Process-wide; call once at start, before the heavy allocations. kInternal, naming the setting,
// when the allocator refuses one.
#pragma once

#include <cstddef>

#include "base/status.h"

namespace marlaas {

inline constexpr size_t kHeapMmapThresholdBytes = size_t(32) << 20;
inline constexpr size_t kHeapTrimThresholdBytes = size_t(1) << 30;

Status KeepFreedHeapMemory();

}  // namespace marlaas

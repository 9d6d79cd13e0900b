// A tenant's error as a stage reports it to serve. The metrics record's `last_error` is what serve
// watches, but it holds 95 bytes; the whole text (a verifier's stderr, a path and its errno) goes
// to <tenant dir>/<role>.error too, and serve takes the reason it fails the tenant with from
// there (FullTenantError), so `status` and the tenant's `state` file show all of it.
#pragma once

#include <string>

#include "shm/metrics.h"

namespace marlaas::pipeline {

// Up to this much of an error is kept in the file.
inline constexpr size_t kTenantErrorBytes = 4096;

// Sets m->last_error to `text` (cut to its size) and writes `text` (cut to kTenantErrorBytes) to
// `tenant_dir`/`role`.error, atomically; a failed write is logged to stderr and otherwise ignored
// (serve then has the cut text). `role`: trainer, rollout or verifier.
void SetTenantError(const std::string& tenant_dir, const char* role, const std::string& text,
                    TenantMetrics* m);

// Clears m->last_error and removes `tenant_dir`/`role`.error: the problem is over (a step or a
// save that failed has since succeeded), and `status` stops showing it.
void ClearTenantError(const std::string& tenant_dir, const char* role, TenantMetrics* m);

// The whole error behind `cut` (a last_error serve read): the text of `tenant_dir`/`role`.error
// when it begins with `cut`, else `cut` itself (no file, or it holds an older error).
std::string FullTenantError(const std::string& tenant_dir, const char* role,
                            const std::string& cut);

}  // namespace marlaas::pipeline

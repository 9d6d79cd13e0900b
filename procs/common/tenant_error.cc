#include "procs/common/tenant_error.h"

#include <cstdio>
#include <filesystem>

#include "base/file_util.h"

namespace marlaas::pipeline {

void SetTenantError(const std::string& tenant_dir, const char* role, const std::string& text,
                    TenantMetrics* m) {
  std::snprintf(m->last_error, sizeof(m->last_error), "%s", text.c_str());
  const std::string path = tenant_dir + "/" + role + ".error";
  const Status st = WriteFileAtomically(path, text.substr(0, kTenantErrorBytes));
  if (!st.ok()) std::fprintf(stderr, "marlaas: %s\n", st.ToString().c_str());
}

void ClearTenantError(const std::string& tenant_dir, const char* role, TenantMetrics* m) {
  m->last_error[0] = '\0';
  std::error_code ec;
  std::filesystem::remove(tenant_dir + "/" + role + ".error", ec);
}

std::string FullTenantError(const std::string& tenant_dir, const char* role,
                            const std::string& cut) {
  auto text = ReadFile(tenant_dir + "/" + role + ".error");
  if (!text.ok() || text->compare(0, cut.size(), cut) != 0) return cut;
  return *text;
}

}  // namespace marlaas::pipeline

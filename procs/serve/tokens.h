// Tokens: who may see and control which tenant. The admin token lives in
// <state-dir>/admin.token and each tenant's in <state-dir>/tenants/<id>/token, both mode 0600
// and written atomically; both survive a restart of the service. A token is 32 hex digits from
// /dev/urandom, compared in constant time. Not thread-safe.
#pragma once

#include <string>

#include "base/status.h"

namespace marlaas::serve {

class Tokens {
 public:
  // Reads the admin token, creating it when the state dir has none.
  static Result<Tokens> Open(const std::string& state_dir);

  const std::string& admin() const { return admin_; }
  // A new token for `tenant` (replacing any earlier one), stored with the tenant.
  Result<std::string> Issue(const std::string& tenant);
  // True for the admin token, or for `tenant`'s own token.
  bool Allows(const std::string& token, const std::string& tenant) const;
  bool IsAdmin(const std::string& token) const;
  // The tenant of the state dir whose own token `token` is ("" for none): reads every tenant's.
  std::string TenantOf(const std::string& token) const;

 private:
  std::string state_dir_, admin_;
};

}  // namespace marlaas::serve

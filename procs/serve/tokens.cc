#include "procs/serve/tokens.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "base/file_util.h"
#include "procs/common/pipeline.h"
#include "proto/job_spec.h"

namespace marlaas::serve {
namespace {

Result<std::string> NewToken() {
  unsigned char raw[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open /dev/urandom", errno);
  const ssize_t n = ::read(fd, raw, sizeof(raw));
  ::close(fd);
  if (n != ssize_t(sizeof(raw))) return Status(StatusCode::kIo, "short read from /dev/urandom");
  static const char kHex[] = "0123456789abcdef";
  std::string t;
  for (unsigned char b : raw) {
    t += kHex[b >> 4];
    t += kHex[b & 15];
  }
  return t;
}

// Writes `token` to `path` with mode 0600, atomically.
Status StoreToken(const std::string& path, const std::string& token) {
  const mode_t old = ::umask(0077);
  Status st = WriteFileAtomically(path, token + "\n");
  ::umask(old);
  if (st.ok() && ::chmod(path.c_str(), 0600) != 0) return ErrnoStatus("chmod " + path, errno);
  return st;
}

bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || a.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Result<Tokens> Tokens::Open(const std::string& state_dir) {
  Tokens t;
  t.state_dir_ = state_dir;
  const std::string path = state_dir + "/admin.token";
  auto existing = ReadFile(path);
  if (existing.ok() && !Trim(*existing).empty()) {
    t.admin_ = Trim(*existing);
    (void)::chmod(path.c_str(), 0600);
    return t;
  }
  MARLAAS_ASSIGN_OR_RETURN(t.admin_, NewToken());
  MARLAAS_RETURN_IF_ERROR(StoreToken(path, t.admin_));
  return t;
}

Result<std::string> Tokens::Issue(const std::string& tenant) {
  if (!ValidTenantId(tenant))
    return Status(StatusCode::kInvalidArgument, "'" + tenant + "' is not a tenant id");
  MARLAAS_ASSIGN_OR_RETURN(std::string token, NewToken());
  MARLAAS_RETURN_IF_ERROR(StoreToken(pipeline::TenantDir(state_dir_, tenant) + "/token", token));
  return token;
}

bool Tokens::IsAdmin(const std::string& token) const { return SameToken(token, admin_); }

std::string Tokens::TenantOf(const std::string& token) const {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(state_dir_ + "/tenants", ec)) {
    auto own = ReadFile(e.path().string() + "/token");
    if (own.ok() && SameToken(token, Trim(*own))) return e.path().filename().string();
  }
  return "";
}

bool Tokens::Allows(const std::string& token, const std::string& tenant) const {
  if (!ValidTenantId(tenant)) return false;  // also keeps the path below inside the state dir
  if (IsAdmin(token)) return true;
  auto own = ReadFile(pipeline::TenantDir(state_dir_, tenant) + "/token");
  return own.ok() && SameToken(token, Trim(*own));
}

}  // namespace marlaas::serve

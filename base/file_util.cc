#include "base/file_util.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace marlaas {
namespace {

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

const char* NotARegularFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return nullptr;
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISFIFO(st.st_mode)) return "a pipe";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a device";
}

Status CheckOutputFile(const std::string& flag, const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return Status(StatusCode::kNotFound, flag + " " + path + ": no folder " + dir);
  if (access(dir.c_str(), W_OK) != 0)
    return ErrnoStatus(flag + " " + path + ": cannot write in " + dir, errno);
  if (std::filesystem::is_directory(path, ec))
    return Status(StatusCode::kInvalidArgument,
                  flag + " " + path + " is a folder: give a file name in it");
  if (const char* what = NotARegularFile(path)) {
    return Status(StatusCode::kInvalidArgument,
                  flag + " " + path + " is " + what + ": give a file name (it would be replaced)");
  }
  return Status::Ok();
}

Result<bool> RotateIfLarger(const std::string& path, const std::string& older, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) < max_bytes)
    return false;
  if (::rename(path.c_str(), older.c_str()) != 0)
    return ErrnoStatus("rotating " + path + " to " + older, errno);
  return true;
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  if (const char* what = NotARegularFile(path)) {
    return Status(StatusCode::kInvalidArgument,
                  path + " is " + what + ", not a file: writing would replace it");
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create " + tmp, errno);
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoStatus("write " + tmp, err);
    }
    p += w;
    left -= size_t(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("fsync " + tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename to " + path, err);
  }
  int dir = ::open(DirOf(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  return Status::Ok();
}

Status SyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open " + path, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  return rc == 0 ? Status::Ok() : ErrnoStatus("fsync " + path, err);
}

Result<std::string> ReadUserFile(const std::string& path, size_t max_bytes, int quiet_ms) {
  // O_NONBLOCK: opening a FIFO that no process writes to must not wait (it did, for ever).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status(StatusCode::kNotFound, "no file " + path);
    return ErrnoStatus("open " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Status(StatusCode::kInvalidArgument, path + " is a folder, not a file");
  }
  const bool pipe = S_ISFIFO(st.st_mode);
  // Anything else (a file, a terminal, a device) is read blocking, as before.
  if (!pipe) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  char buf[65536];
  bool waited_for_writer = false;
  // Waits up to quiet_ms for the pipe to have something (data, or its writer gone).
  auto wait = [&] {
    pollfd p{fd, POLLIN, 0};
    int ready;
    do {
      ready = ::poll(&p, 1, quiet_ms);
    } while (ready < 0 && errno == EINTR);
    return ready != 0;
  };
  auto quiet = [&] {
    ::close(fd);
    return Status(StatusCode::kTimeout, path + " is a pipe that no process wrote to in " +
                                            std::to_string(quiet_ms) + " ms");
  };
  for (;;) {
    // A pipe is read without blocking: EAGAIN while its writer has not written yet, 0 at once
    // while no process has it open for writing (a writer may still come: wait for one, once).
    const ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (pipe && r < 0 && errno == EAGAIN) {
      if (!wait()) return quiet();
      continue;
    }
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("read " + path, err);
    }
    if (r == 0 && pipe && out.empty() && !waited_for_writer) {
      waited_for_writer = true;
      if (!wait()) return quiet();
      continue;
    }
    if (r == 0) break;
    out.append(buf, size_t(r));
    if (out.size() > max_bytes) {
      ::close(fd);
      // A device or a pipe has no size of its own: say what it is (/dev/zero never ends).
      const char* what = S_ISREG(st.st_mode) ? " is larger than the "
                         : pipe              ? " is a pipe that gave more than the "
                                             : " is a device that gave more than the ";
      return Status(StatusCode::kResourceExhausted,
                    path + what + std::to_string(max_bytes) + " bytes allowed");
    }
  }
  ::close(fd);
  if (pipe && out.empty()) {
    return Status(StatusCode::kInvalidArgument, path + " is a pipe that gave nothing");
  }
  return out;
}

Result<std::string> ReadFile(const std::string& path) {
  return ReadFileAtMost(path, std::string().max_size());
}

Result<std::string> ReadFileAtMost(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return Status(StatusCode::kNotFound, "no file " + path);
    return ErrnoStatus("open " + path, errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool folder = S_ISDIR(st.st_mode);
    ::close(fd);
    return Status(StatusCode::kInvalidArgument,
                  path + (folder ? " is a folder, not a file"
                                 : " is not a regular file (a pipe or device: reading it could "
                                   "wait for ever)"));
  }
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return ErrnoStatus("read " + path, err);
    }
    if (r == 0) break;
    out.append(buf, size_t(r));
    if (out.size() > max_bytes) {
      ::close(fd);
      return Status(StatusCode::kResourceExhausted,
                    path + " holds more than " + std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(fd);
  return out;
}

}  // namespace marlaas

namespace marlaas {
bool FileExists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }
}  // namespace marlaas

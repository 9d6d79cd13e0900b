#include "procs/serve/control_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace marlaas::serve {
namespace {

constexpr size_t kMaxConnections = 128;
constexpr size_t kMaxPendingReply = 8u << 20;  // a client that stops reading is dropped

Result<sockaddr_un> Address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) {
    return Status(StatusCode::kInvalidArgument,
                  "control socket path '" + path + "' is longer than " +
                      std::to_string(sizeof(a.sun_path) - 1) + " bytes: use a shorter state dir");
  }
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<ControlServer> ControlServer::Listen(const std::string& path, int idle_timeout_ms,
                                            int frame_deadline_ms) {
  MARLAAS_ASSIGN_OR_RETURN(sockaddr_un addr, Address(path));
  // A socket file that nobody answers on is a dead service's.
  const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return ErrnoStatus("socket", errno);
  const bool live = ::connect(probe, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(probe);
  if (live) {
    return Status(StatusCode::kAlreadyExists,
                  "a service is already listening on " + path + " (one service per state dir)");
  }
  ControlServer s;
  s.path_ = path;
  s.idle_timeout_ms_ = idle_timeout_ms;
  s.frame_deadline_ms_ = frame_deadline_ms;
  MARLAAS_RETURN_IF_ERROR(s.Bind());
  return s;
}

Status ControlServer::Bind() {
  MARLAAS_ASSIGN_OR_RETURN(sockaddr_un addr, Address(path_));
  ::unlink(path_.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  const mode_t old = ::umask(0177);  // the socket file is created 0600
  const int bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  const int bind_errno = errno;
  ::umask(old);
  Status st = Status::Ok();
  struct stat file {};
  if (bound != 0) {
    st = ErrnoStatus("bind " + path_, bind_errno);
  } else if (::chmod(path_.c_str(), 0600) != 0) {
    st = ErrnoStatus("chmod " + path_, errno);
  } else if (::listen(fd, 64) != 0) {
    st = ErrnoStatus("listen " + path_, errno);
  } else if (::stat(path_.c_str(), &file) != 0) {
    st = ErrnoStatus("stat " + path_, errno);
  }
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);  // its connections stay open
  listen_fd_ = fd;
  file_ = {file.st_dev, file.st_ino};
  return Status::Ok();
}

void ControlServer::KeepSocketFile(int64_t now_ms) {
  if (now_ms - checked_ms_ < 1000) return;
  checked_ms_ = now_ms;
  struct stat file {};
  if (::stat(path_.c_str(), &file) == 0 && std::pair{file.st_dev, file.st_ino} == file_) return;
  // Removed (a clean-up, a mistaken rm) or replaced: every client would be told that no service
  // runs here, and a new one would be refused by the state dir's lock.
  const Status st = Bind();
  if (st.ok()) {
    std::fprintf(stderr, "[serve] the control socket %s was gone; made it again\n", path_.c_str());
    rebind_error_.clear();
  } else if (st.message() != rebind_error_) {
    std::fprintf(stderr, "[serve] the control socket %s is gone and cannot be made again: %s\n",
                 path_.c_str(), st.ToString().c_str());
    rebind_error_ = st.message();
  }
}

ControlServer::ControlServer(ControlServer&& o) noexcept
    : path_(std::move(o.path_)),
      listen_fd_(o.listen_fd_),
      idle_timeout_ms_(o.idle_timeout_ms_),
      frame_deadline_ms_(o.frame_deadline_ms_),
      conns_(std::move(o.conns_)),
      file_(o.file_),
      checked_ms_(o.checked_ms_),
      rebind_error_(std::move(o.rebind_error_)) {
  o.listen_fd_ = -1;
  o.conns_.clear();
  o.path_.clear();
}

ControlServer::~ControlServer() {
  for (auto& [fd, c] : conns_) ::close(fd);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
}

void ControlServer::Close(int fd, const char* why) {
  if (why != nullptr) std::fprintf(stderr, "[serve] control connection closed: %s\n", why);
  ::close(fd);
  conns_.erase(fd);
}

void ControlServer::ReadFrom(int fd, const Handler& handler, int64_t now_ms) {
  Conn& c = conns_[fd];
  char buf[65536];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    Close(fd, c.reader.pending() > 0 && !c.reader.HasFrame()
                  ? "the client hung up in the middle of a frame"
                  : nullptr);
    return;
  }
  c.last_ms = now_ms;
  if (c.reader.pending() == 0) c.frame_ms = now_ms;
  c.reader.Feed(buf, size_t(n));
  ServeOne(fd, handler, now_ms);
}

void ControlServer::ServeOne(int fd, const Handler& handler, int64_t now_ms) {
  Conn& c = conns_[fd];
  if (!c.out.empty() || !c.reader.HasFrame()) return;
  auto frame = c.reader.Next();
  if (!frame.ok()) {
    Close(fd, frame.status().message().c_str());
    return;
  }
  // The next frame's clock starts now (its bytes may have come with this one's).
  c.frame_ms = c.reader.pending() > 0 ? now_ms : 0;
  pb::ControlRequest req;
  pb::ControlReply reply;
  if (!req.ParseFromString(**frame)) {
    // The frame's bounds are sound: the connection can go on. (A string that is not UTF-8, such
    // as a token typed with a stray byte, fails here too.)
    std::fprintf(stderr, "[serve] control connection: a frame that is not a ControlRequest\n");
    reply.set_error(
        "the request is not a valid ControlRequest (a string field that is not UTF-8, or not a "
        "request of this service's protocol)");
  } else {
    reply = handler(req);
  }
  auto encoded = EncodeFrame(reply.SerializeAsString());
  if (!encoded.ok()) {  // a reply too large for one frame: say so instead
    pb::ControlReply small;
    small.set_request_id(req.request_id());
    small.set_error("the reply exceeds the control frame limit");
    encoded = EncodeFrame(small.SerializeAsString());
  }
  c.out += *encoded;
  if (c.out.size() > kMaxPendingReply) Close(fd, "the client does not read its replies");
}

void ControlServer::CloseSilentest(int64_t now_ms) {
  auto silentest = conns_.end();
  for (auto it = conns_.begin(); it != conns_.end(); ++it)
    if (silentest == conns_.end() || it->second.last_ms < silentest->second.last_ms) silentest = it;
  if (silentest == conns_.end()) return;
  const std::string why = "silent for " + std::to_string(now_ms - silentest->second.last_ms) +
                          " ms with " + std::to_string(kMaxConnections) +
                          " connections open, and another client came";
  Close(silentest->first, why.c_str());
}

void ControlServer::Poll(int timeout_ms, const Handler& handler) {
  std::vector<pollfd> fds;
  fds.push_back({listen_fd_, POLLIN, 0});
  // One request at a time per connection: nothing is read while its reply waits, nor while it
  // holds a whole request not yet answered (answered below without waiting).
  bool ready_to_answer = false;
  for (auto& [fd, c] : conns_) {
    const bool idle = c.out.empty() && !c.reader.HasFrame();
    ready_to_answer = ready_to_answer || (c.out.empty() && c.reader.HasFrame());
    fds.push_back({fd, short((idle ? POLLIN : 0) | (c.out.empty() ? 0 : POLLOUT)), 0});
  }
  const int ready = ::poll(fds.data(), fds.size(), ready_to_answer ? 0 : timeout_ms);
  const int64_t now = NowMs();
  KeepSocketFile(now);
  for (size_t i = 1; i < fds.size() && ready > 0; ++i) {
    const int fd = fds[i].fd;
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
      ReadFrom(fd, handler, now);
      if (!conns_.count(fd)) continue;
    }
    Conn& c = conns_[fd];
    if (!c.out.empty()) {
      const ssize_t w = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        c.out.erase(0, size_t(w));
        c.last_ms = now;
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        Close(fd, "the client went away before its reply");
      }
    }
  }
  // Requests that came with an earlier one (pipelined), now that its reply has gone.
  std::vector<int> waiting;
  for (const auto& [fd, c] : conns_)
    if (c.out.empty() && c.reader.HasFrame()) waiting.push_back(fd);
  for (int fd : waiting) ServeOne(fd, handler, now);
  if (ready > 0 && (fds[0].revents & POLLIN)) {
    // Past the cap the connection silent longest makes room, a few per round: a flood of new
    // clients cannot empty the table in one go.
    for (int accepted = 0; accepted < 16; ++accepted) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      if (conns_.size() >= kMaxConnections) CloseSilentest(now);
      conns_[fd].last_ms = now;
    }
  }
  CloseIdle(now);
}

void ControlServer::CloseIdle(int64_t now_ms) {
  std::vector<std::pair<int, std::string>> idle;
  for (const auto& [fd, c] : conns_) {
    if (c.frame_ms != 0 && !c.reader.HasFrame() && now_ms - c.frame_ms > frame_deadline_ms_) {
      idle.emplace_back(fd, "a frame not whole " + std::to_string(now_ms - c.frame_ms) +
                                " ms after its first byte (limit " +
                                std::to_string(frame_deadline_ms_) + " ms)");
      continue;
    }
    if (now_ms - c.last_ms <= idle_timeout_ms_) continue;
    const char* what = !c.out.empty()           ? "its reply unread"
                       : c.reader.pending() > 0 ? "a frame left unfinished"
                                                : "idle";
    idle.emplace_back(fd, std::string(what) + " for " + std::to_string(now_ms - c.last_ms) +
                              " ms (limit " + std::to_string(idle_timeout_ms_) + " ms)");
  }
  for (const auto& [fd, why] : idle) Close(fd, why.c_str());
}

}  // namespace marlaas::serve

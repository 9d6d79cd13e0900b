#include "procs/serve/control_frame.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace marlaas::serve {
namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
Status WaitFd(int fd, short events, Clock::time_point deadline, const char* what) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0)
      return Status(StatusCode::kTimeout, std::string("control socket: ") + what);
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, int(left.count()));
    if (r > 0) return Status::Ok();
    if (r < 0 && errno != EINTR) return ErrnoStatus("poll on the control socket", errno);
  }
}

}  // namespace

Result<std::string> EncodeFrame(const std::string& payload) {
  if (payload.size() > kMaxControlFrame) {
    return Status(StatusCode::kInvalidArgument,
                  "control frame of " + std::to_string(payload.size()) +
                      " bytes exceeds the maximum of " + std::to_string(kMaxControlFrame));
  }
  const uint32_t n = uint32_t(payload.size());
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + payload;
}

bool FrameReader::HasFrame() const {
  if (buffer_.size() < 4) return false;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(uint8_t(buffer_[size_t(i)])) << (8 * i);
  return n > kMaxControlFrame || buffer_.size() >= 4 + size_t(n);
}

Result<std::optional<std::string>> FrameReader::Next() {
  if (buffer_.size() < 4) return std::optional<std::string>();
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t(uint8_t(buffer_[size_t(i)])) << (8 * i);
  if (n > kMaxControlFrame) {
    return Status(StatusCode::kInvalidArgument, "control frame declares " + std::to_string(n) +
                                                    " bytes, over the maximum of " +
                                                    std::to_string(kMaxControlFrame));
  }
  if (buffer_.size() < 4 + size_t(n)) return std::optional<std::string>();
  std::string payload = buffer_.substr(4, n);
  buffer_.erase(0, 4 + size_t(n));
  return std::optional<std::string>(std::move(payload));
}

Status WriteFrame(int fd, const std::string& payload, Clock::time_point deadline) {
  MARLAAS_ASSIGN_OR_RETURN(std::string frame, EncodeFrame(payload));
  size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n =
        ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += size_t(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      MARLAAS_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, "the peer is not reading"));
    } else if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      return Status(StatusCode::kUnavailable, "the peer closed the connection");
    } else {
      return ErrnoStatus("writing to the control socket", errno);
    }
  }
  return Status::Ok();
}

Result<std::string> ReadFrame(int fd, Clock::time_point deadline) {
  FrameReader reader;
  for (;;) {
    MARLAAS_ASSIGN_OR_RETURN(std::optional<std::string> frame, reader.Next());
    if (frame) return std::move(*frame);
    MARLAAS_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, "no reply from the service"));
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) {
      return Status(StatusCode::kUnavailable, reader.pending()
                                                  ? "the service closed the connection mid-frame"
                                                  : "the service closed the connection");
    }
    if (n < 0 && errno == ECONNRESET)  // the peer went away with data unread: closed too
      return Status(StatusCode::kUnavailable, "the service closed the connection (reset)");
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      return ErrnoStatus("reading the control socket", errno);
    if (n > 0) reader.Feed(buf, size_t(n));
  }
}

}  // namespace marlaas::serve

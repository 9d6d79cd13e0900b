#include "procs/cli/control_client.h"

#include <google/protobuf/util/json_util.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/file_util.h"
#include "procs/serve/control_frame.h"

namespace marlaas::cli {

std::string ResolveToken(const std::string& state_dir, const std::string& flag) {
  if (!flag.empty()) return flag;
  auto admin = ReadFile(state_dir + "/admin.token");
  if (!admin.ok()) return "";
  std::string t = *admin;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
  return t;
}

Result<pb::ControlReply> CallService(const std::string& state_dir, pb::ControlRequest request,
                                     int timeout_ms) {
  const std::string path = state_dir + "/control.sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path))
    return Status(StatusCode::kInvalidArgument, "control socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const auto deadline = serve::Clock::now() + std::chrono::milliseconds(timeout_ms);
  // Non-blocking: a blocking connect to a service whose backlog is full (a service that stopped
  // accepting) would wait with no end; on a Unix socket it says EAGAIN instead, and we try again
  // until the deadline.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoStatus("socket", errno);
  for (;;) {
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) break;
    const int e = errno;
    if ((e == EAGAIN || e == EINTR) && serve::Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    ::close(fd);
    if (e == EAGAIN) {
      return Status(StatusCode::kTimeout,
                    "the service on " + path + " accepted no connection within " +
                        std::to_string(timeout_ms) + " ms (its queue of connections is full)");
    }
    return Status(StatusCode::kUnavailable,
                  "no service is listening on " + path + " (" + std::strerror(e) +
                      "): start one with `marlaas serve --state-dir " + state_dir + "`");
  }
  Status st = serve::WriteFrame(fd, request.SerializeAsString(), deadline);
  Result<std::string> frame = st.ok() ? serve::ReadFrame(fd, deadline) : Result<std::string>(st);
  ::close(fd);
  if (!frame.ok() && frame.status().code() == StatusCode::kUnavailable) {
    // Connected, then cut off (a service stopping, SIGTERM): the request may or may not have
    // been carried out, and the caller is told so rather than "Connection reset by peer".
    return Status(StatusCode::kUnavailable,
                  "the service on " + path + " closed the connection before it answered (" +
                      frame.status().message() +
                      "; was it stopped?): whether the request took effect is unknown; `marlaas "
                      "status --state-dir " +
                      state_dir + "` shows it once a service runs there");
  }
  if (!frame.ok()) return frame.status();
  pb::ControlReply reply;
  if (!reply.ParseFromString(*frame))
    return Status(StatusCode::kCorrupt, "the service's reply is not a ControlReply");
  return reply;
}

std::string StatusReplyJson(const pb::StatusReply& reply) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(reply, &out, o);
  return out;
}

}  // namespace marlaas::cli

// ControlServer: the service's control socket, a Unix stream socket at <state-dir>/control.sock
// with mode 0600, speaking control frames (control_frame.h). It is driven from the service's own
// thread: Poll() accepts, reads, answers through the handler and writes what is ready, waiting
// at most its timeout. A connection that sends a malformed, truncated or oversized frame, or
// that stops reading its replies, is closed and logged; the others and the service carry on.
// A connection has one request in hand at a time: it is answered once its reply is written, and
// nothing more is read from it until then (pipelined requests wait in the socket, so a client
// that sends many and reads none holds one reply, not one per request, and a burst of costly
// requests takes turns with the other connections). At most 128 connections are open at once;
// when a client connects past that, the connection silent longest is closed to make room, so
// clients that connect and go quiet cannot lock the others out. A frame must arrive whole
// within 10 s of its first byte, and a connection on which nothing moves (no byte read, no reply
// byte written) for the idle timeout is closed; both are logged (`marlaas` clients send one
// request per connection and read its reply at once). A socket file that is removed or replaced
// while the service runs is made again within a second or two.
// Not thread-safe.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <utility>

#include "base/status.h"
#include "procs/serve/control_frame.h"
#include "proto/marlaas.pb.h"

namespace marlaas::serve {

class ControlServer {
 public:
  using Handler = std::function<pb::ControlReply(const pb::ControlRequest&)>;

  // Binds `path`. A socket file left by a dead service is replaced; a live one is an error.
  static Result<ControlServer> Listen(const std::string& path, int idle_timeout_ms = 60'000,
                                      int frame_deadline_ms = 10'000);
  ControlServer(ControlServer&& other) noexcept;
  ControlServer& operator=(ControlServer&&) = delete;
  ~ControlServer();  // closes every connection and removes the socket file

  void Poll(int timeout_ms, const Handler& handler);
  const std::string& path() const { return path_; }
  size_t connections() const { return conns_.size(); }

 private:
  struct Conn {
    FrameReader reader;
    std::string out;       // reply bytes not yet written
    int64_t last_ms = 0;   // when a byte last moved (or it was accepted), steady clock
    int64_t frame_ms = 0;  // when the first byte of the frame not yet whole came (0: none)
  };
  // Answers the connection's next whole frame, if it has one and no reply is waiting.
  void ServeOne(int fd, const Handler& handler, int64_t now_ms);
  // Closes the connection on which nothing moved for longest (a new client needs its slot).
  void CloseSilentest(int64_t now_ms);
  ControlServer() = default;
  // Makes the socket file anew at path_ and listens there (replacing the listening socket; open
  // connections stay).
  Status Bind();
  // At most once a second: a socket file that was removed or replaced is made again (said on
  // stderr), so that clients keep finding the service.
  void KeepSocketFile(int64_t now_ms);
  void Close(int fd, const char* why);
  void ReadFrom(int fd, const Handler& handler, int64_t now_ms);
  void CloseIdle(int64_t now_ms);

  std::string path_;
  int listen_fd_ = -1;
  int idle_timeout_ms_ = 60'000;
  int frame_deadline_ms_ = 10'000;
  std::map<int, Conn> conns_;
  std::pair<dev_t, ino_t> file_{};  // the socket file bound
  int64_t checked_ms_ = 0;
  std::string rebind_error_;  // the last failure to make it again, said once
};

}  // namespace marlaas::serve

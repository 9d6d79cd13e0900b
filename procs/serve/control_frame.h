// Control frames: what crosses the control socket (<state-dir>/control.sock). A frame is a 4-byte
// little-endian payload length followed by that many bytes of a serialised protobuf
// (ControlRequest to the service, ControlReply back). A length above kMaxControlFrame is refused
// before anything is read or allocated.
//
// FrameReader assembles frames from whatever bytes arrive (a non-blocking server reads in pieces).
// ReadFrame/WriteFrame are the blocking client side, bounded by a deadline. Not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace marlaas::serve {

inline constexpr uint32_t kMaxControlFrame = 1u << 20;

// "<4-byte length><payload>"; kInvalidArgument when the payload is too large.
Result<std::string> EncodeFrame(const std::string& payload);

class FrameReader {
 public:
  // Appends bytes read from the connection.
  void Feed(const char* data, size_t n) { buffer_.append(data, n); }
  // The next whole payload, nullopt when more bytes are needed, or an error when the declared
  // length is over the maximum (the connection cannot be resynchronised: close it).
  Result<std::optional<std::string>> Next();
  // Bytes held that do not make a whole frame (non-zero at EOF means a truncated frame).
  size_t pending() const { return buffer_.size(); }
  // Whether a whole frame is held (Next() would return it or an error).
  bool HasFrame() const;

 private:
  std::string buffer_;
};

using Clock = std::chrono::steady_clock;

// Writes the whole frame; kDeadlineExceeded when the peer does not take it in time.
Status WriteFrame(int fd, const std::string& payload, Clock::time_point deadline);
// Reads one whole frame; kUnavailable at EOF, kDeadlineExceeded, or the FrameReader errors.
Result<std::string> ReadFrame(int fd, Clock::time_point deadline);

}  // namespace marlaas::serve

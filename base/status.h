// Status and Result<T>: how every MARLaaS module reports an expected failure.
// A Status is a code plus a message a user can act on; Result<T> holds either a value or a
// non-OK Status. Neither throws. Values are cheap to move; use from any thread.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace marlaas {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (bad name, bad spec field)
  kNotFound,            // a named thing does not exist
  kAlreadyExists,       // create of something that exists, or a second live owner
  kFailedPrecondition,  // wrong state, e.g. a layout version mismatch
  kTimeout,             // a deadline passed while waiting on another process
  kPeerDead,            // the process on the other side exited
  kCorrupt,             // data failed an integrity check
  kResourceExhausted,   // a capacity or size limit
  kIo,                  // an operating-system call failed
  kUnavailable,         // not ready yet; retrying may succeed
  kInternal,            // a bug or an unexpected state
  kCancelled,           // stopped on request (SIGINT/SIGTERM) before it finished
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "CODE: message", for logs and CLI output.
  std::string ToString() const;
  // Prepends context: "context: message".
  Status Annotate(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Either a T or a non-OK Status. REQUIRES: ok() before value().
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status(StatusCode::kInternal, "Result built from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }

 private:
  std::optional<T> value_;
  Status status_;
};

Status ErrnoStatus(const std::string& what, int err);

}  // namespace marlaas

#define MARLAAS_CONCAT_INNER(a, b) a##b
#define MARLAAS_CONCAT(a, b) MARLAAS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define MARLAAS_RETURN_IF_ERROR(expr) \
  do {                                \
    ::marlaas::Status _st = (expr);   \
    if (!_st.ok()) return _st;        \
  } while (0)

// `lhs = value of rexpr`, or return its Status from the enclosing function.
#define MARLAAS_ASSIGN_OR_RETURN(lhs, rexpr) \
  MARLAAS_ASSIGN_OR_RETURN_IMPL(MARLAAS_CONCAT(_result_, __LINE__), lhs, rexpr)
#define MARLAAS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()

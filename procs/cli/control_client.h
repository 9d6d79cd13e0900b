// The client side of the control socket, for `marlaas submit/status/stop/export/logs`: one
// request, one reply, within a deadline. The token is --token when given, else the admin token
// when this user can read <state-dir>/admin.token, else none.
#pragma once

#include <string>

#include "base/status.h"
#include "proto/marlaas.pb.h"

namespace marlaas::cli {

// Sends `request` (its token filled in by ResolveToken when empty) to the service whose state
// dir is `state_dir`; the reply's ok/error is the caller's to read.
Result<pb::ControlReply> CallService(const std::string& state_dir, pb::ControlRequest request,
                                     int timeout_ms = 30000);

// `status --json`: the reply as JSON with the proto's field names, every field present, numbers
// as JSON numbers.
std::string StatusReplyJson(const pb::StatusReply& reply);

// --token, else the readable admin token, else "".
std::string ResolveToken(const std::string& state_dir, const std::string& flag);

}  // namespace marlaas::cli

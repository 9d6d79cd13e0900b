// Valid UTF-8 for text that crosses a protobuf `string` field (which must hold valid UTF-8: a
// parser refuses the whole message otherwise). Text from outside the service (a verifier's stderr,
// a log line, a reason cut at a byte limit in the middle of a character) may not be.
#pragma once

#include <string>
#include <string_view>

namespace marlaas {

// `text` with each run of bytes that are not part of a well-formed UTF-8 sequence (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF, no truncated sequence) replaced by one
// U+FFFD. Valid text comes back unchanged.
std::string ValidUtf8(std::string_view text);

}  // namespace marlaas

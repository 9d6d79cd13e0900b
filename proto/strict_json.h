// Strict JSON for what users write by hand (job specs): RFC 8259 text — no trailing comma, no
// comment, nothing after the value — in which no object names a key twice. Protobuf's JSON
// parser takes a trailing comma and keeps the last of two equal keys without a word (or, for a
// field of a oneof, says something about oneofs), so a job file that says
// `"tenant": "a", ..., "tenant": "b"` would quietly train "b". Thread-safe.
#pragma once

#include <google/protobuf/descriptor.h>

#include <string>

#include "base/status.h"

namespace marlaas {

// OK, or kInvalidArgument with a predicate for the caller's noun: "is not valid JSON (line L,
// column C: <what the parser expected>)", or "names key 'a.b[2].c' twice" (the path from the
// top). With `message`, the text is read as that message's JSON: a field named by both of its
// names (`max_steps` and `maxSteps`, which protobuf merges) is named twice too; a map's keys
// and unknown fields are compared as written; and a bool field given anything but true, false
// or null (protobuf took "yes") is refused: "gives key 'a.b' a value that is not true or false";
// and so is a list field given one value instead of a list (protobuf took it as a list of one):
// "gives key 'a.b' one value where it takes a list ([...])". A value of another kind than its
// field takes is named with what it takes ("gives key 'a.b' an object where it takes a whole
// number"), and a string or key with a NUL character is refused. With or without `message`,
// objects and lists nested more than 32 deep are refused.
Status CheckStrictJson(const std::string& text,
                       const google::protobuf::Descriptor* message = nullptr);

}  // namespace marlaas

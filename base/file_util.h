// Small file helpers with the durability the state dir needs. Thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace marlaas {

// Writes `contents` to `path` so that a crash leaves either the old file or the new one: a
// temporary file in the same folder, fsync, rename, fsync of the folder. A `path` that exists
// and is not a regular file (a device, a pipe, a folder) is refused with kInvalidArgument: the
// rename would replace it (`--json /dev/null`, run as root, replaced /dev/null).
Status WriteFileAtomically(const std::string& path, const std::string& contents);
// Whether the file an option names can be written: its folder exists and is writable, and it is
// not a folder, a device or a pipe (WriteFileAtomically would replace it). Checked before work
// whose results it is to hold (hours of benchmark runs, a demo) so that they are not lost to a
// typo; the error names the option (`flag`).
Status CheckOutputFile(const std::string& flag, const std::string& path);
// Keeps a log from growing without end: when `path` holds `max_bytes` or more, it is renamed to
// `older` (replacing the one there), so the log and its previous part hold at most about twice
// `max_bytes`. Returns whether it rotated; a failed rename is an error naming both.
Result<bool> RotateIfLarger(const std::string& path, const std::string& older, uint64_t max_bytes);
// What `path` is when it exists and is not a regular file (after symlinks): "a folder", "a
// device", "a pipe", "a socket"; nullptr for a regular file or nothing there.
const char* NotARegularFile(const std::string& path);
// fsync of a file or a folder (a folder: so that the names created in it are durable).
Status SyncPath(const std::string& path);
// The whole file, or kNotFound / kIo naming the path; kInvalidArgument for a folder, a FIFO or a
// device (never waits for a writer).
Result<std::string> ReadFile(const std::string& path);
// As ReadFile, but a file with more than `max_bytes` (read, not as stat says: /proc files say 0)
// is refused with kResourceExhausted ("<path> holds more than N bytes") after reading max_bytes
// + 1.
Result<std::string> ReadFileAtMost(const std::string& path, size_t max_bytes);
// A file the user named on the command line: as ReadFile, but a pipe or a device is read too
// (`<(envsubst < job.json)`, /dev/stdin), up to `max_bytes` (kResourceExhausted naming the limit
// past that: /dev/zero ends). A pipe that no process writes to within `quiet_ms` (a FIFO
// nobody opens) is refused with kTimeout, one whose writer closes it without writing with
// kInvalidArgument: never a wait for ever.
Result<std::string> ReadUserFile(const std::string& path, size_t max_bytes, int quiet_ms = 30000);

}  // namespace marlaas

namespace marlaas {
bool FileExists(const std::string& path);
}  // namespace marlaas

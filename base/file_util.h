// Small file helpers with the durability the state dir needs. Thread-safe.
#pragma once

#include <string>

#include "base/status.h"

namespace marlaas {

// Writes `contents` to `path` so that a crash leaves either the old file or the new one: a
// temporary file in the same folder, fsync, rename, fsync of the folder.
Status WriteFileAtomically(const std::string& path, const std::string& contents);
// fsync of a file or a folder (a folder: so that the names created in it are durable).
Status SyncPath(const std::string& path);
// The whole file, or kNotFound / kIo naming the path; kInvalidArgument for a folder, a FIFO or a
// device (never waits for a writer).
Result<std::string> ReadFile(const std::string& path);
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

// One service per state dir: an flock on <state>/service.lock. The service holds it and its
// stages inherit it (the descriptor is not close-on-exec), so a dead service's stages, which
// exit within a second or two of it, still hold it. The file names its holder (pid and start
// time, and "stopping" once it stops): a second service is refused within a second while the
// holder runs, and waits for a stopping or dead one's stages to let go. Thread-compatible.
#pragma once

#include <string>

#include "base/status.h"

namespace marlaas::serve {

// Takes the lock and records this process as its holder; returns the open descriptor (closing it
// releases the lock, once every stage that inherited it has exited too). kAlreadyExists when a
// live other process holds it and has not begun to stop within `live_grace_ms` (it may be about
// to: SIGTERM was sent, and a restart followed at once), or when it is still held after
// `wait_ms` (the stages of a stopping or dead service, or of this process's own earlier one).
Result<int> AcquireStateDirLock(const std::string& state_dir, int wait_ms = 20000,
                                int live_grace_ms = 1000);

// Records in the lock file that its holder (this process, holding `fd`) has begun to stop.
void MarkStateDirLockStopping(int fd);

}  // namespace marlaas::serve

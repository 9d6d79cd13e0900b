// One service per state dir: an flock on <state>/service.lock. The service holds it and its
// stages inherit it (the descriptor is not close-on-exec), so a dead service's stages, which
// exit within a second or two of it, still hold it. The file names its holder (pid and start
// time): a second service is refused at once while the holder runs, and waits for a dead one's
// stages to let go otherwise. Thread-compatible.
#pragma once

#include <string>

#include "base/status.h"

namespace marlaas::serve {

// Takes the lock and records this process as its holder; returns the open descriptor (closing it
// releases the lock, once every stage that inherited it has exited too). kAlreadyExists when a
// live other process holds it, at once, or when it is still held after `wait_ms` (the stages of
// a dead service, or of this process's own earlier service, which are ending).
Result<int> AcquireStateDirLock(const std::string& state_dir, int wait_ms = 20000);

}  // namespace marlaas::serve

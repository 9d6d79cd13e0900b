#include "shm/stale_segments.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "shm/segment.h"

namespace marlaas {
namespace {

constexpr const char kShmDir[] = "/dev/shm";
constexpr const char kPrefix[] = "marlaas.";
// A segment with no creator recorded may be one being created right now: only older ones are
// stale.
constexpr time_t kUnclaimedGraceSeconds = 10;

bool ReadInfo(const std::string& file, SegmentInfo* info, time_t* ctime_out) {
  int fd = ::open((std::string(kShmDir) + "/" + file).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return false;
  }
  info->bytes = static_cast<uint64_t>(st.st_size);
  *ctime_out = st.st_ctime;
  if (st.st_size >= static_cast<off_t>(kPayloadOffset)) {
    void* p = ::mmap(nullptr, kPayloadOffset, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      const auto* h = static_cast<const SegmentHeader*>(p);
      info->initialised = h->magic.load(std::memory_order_acquire) == kSegmentMagic;
      info->creator = ProcessIdentity::Unpack(h->creator);
      ::munmap(p, kPayloadOffset);
    }
  }
  ::close(fd);
  info->creator_alive = IsAlive(info->creator);
  return true;
}

}  // namespace

bool SegmentInfo::stale() const { return !creator_alive; }

Result<std::vector<SegmentInfo>> ListSegments(const std::string& instance) {
  DIR* dir = ::opendir(kShmDir);
  if (dir == nullptr) return ErrnoStatus(std::string("opendir ") + kShmDir, errno);
  std::vector<SegmentInfo> out;
  const time_t now = ::time(nullptr);
  while (dirent* e = ::readdir(dir)) {
    std::string file = e->d_name;
    if (file.rfind(kPrefix, 0) != 0) continue;
    std::string rest = file.substr(sizeof(kPrefix) - 1);
    SegmentInfo info;
    info.system_name = file;
    info.instance = rest.substr(0, rest.find('.'));
    if (!instance.empty() && info.instance != instance) continue;
    time_t ctime = 0;
    if (!ReadInfo(file, &info, &ctime)) continue;  // vanished meanwhile
    if (info.creator.empty() && now - ctime < kUnclaimedGraceSeconds) info.creator_alive = true;
    out.push_back(info);
  }
  ::closedir(dir);
  return out;
}

Result<std::vector<SegmentInfo>> RemoveStaleSegments(const std::string& instance) {
  MARLAAS_ASSIGN_OR_RETURN(std::vector<SegmentInfo> all, ListSegments(instance));
  std::vector<SegmentInfo> removed;
  for (const SegmentInfo& info : all) {
    if (!info.stale()) continue;
    if (::shm_unlink(("/" + info.system_name).c_str()) == 0 || errno == ENOENT) {
      removed.push_back(info);
    } else if (errno == EACCES || errno == EPERM) {
      continue;  // another user's: not ours to remove (the others still are)
    } else {
      return ErrnoStatus("shm_unlink /" + info.system_name, errno);
    }
  }
  return removed;
}

}  // namespace marlaas

#include "base/id_ranges.h"

#include <algorithm>
#include <limits>

namespace marlaas {

bool IdRanges::Insert(uint64_t id) {
  // The range starting after `id`, and the one before it (which may hold it or end at id - 1).
  auto next = ranges_.upper_bound(id);
  if (next != ranges_.begin()) {
    auto prev = std::prev(next);
    if (prev->second >= id) return false;  // inside
    if (prev->second + 1 == id) {
      prev->second = id;
      if (next != ranges_.end() && next->first == id + 1) {  // closes the gap to the next
        prev->second = next->second;
        ranges_.erase(next);
      }
      ++count_;
      return true;
    }
  }
  if (next != ranges_.end() && id != std::numeric_limits<uint64_t>::max() &&
      next->first == id + 1) {
    const uint64_t last = next->second;
    ranges_.erase(next);
    ranges_[id] = last;
  } else {
    ranges_[id] = id;
  }
  ++count_;
  return true;
}

bool IdRanges::Contains(uint64_t id) const {
  auto next = ranges_.upper_bound(id);
  return next != ranges_.begin() && std::prev(next)->second >= id;
}

std::vector<std::pair<uint64_t, uint64_t>> IdRanges::Ranges() const {
  return std::vector<std::pair<uint64_t, uint64_t>>(ranges_.begin(), ranges_.end());
}

bool IdRanges::FromRanges(const std::vector<std::pair<uint64_t, uint64_t>>& given) {
  ranges_.clear();
  count_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> sorted = given;
  for (const auto& [first, last] : sorted)
    if (first > last) return false;
  std::sort(sorted.begin(), sorted.end());
  for (const auto& [first, last] : sorted) {
    if (!ranges_.empty()) {
      auto back = std::prev(ranges_.end());
      // Overlapping or adjacent (back's last + 1 may wrap only at the top id, where it covers).
      if (back->second == std::numeric_limits<uint64_t>::max() || first <= back->second + 1) {
        if (last > back->second) {
          count_ += last - back->second;
          back->second = last;
        }
        continue;
      }
    }
    ranges_[first] = last;
    count_ += last - first + 1;
  }
  return true;
}

}  // namespace marlaas

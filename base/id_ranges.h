// IdRanges: a set of 64-bit ids kept as disjoint, sorted, inclusive ranges [first, last]. Ids
// that come mostly in runs (a tenant's group ids: a rollout incarnation's counter) take a few
// ranges however many there are, where a hash set and a checkpoint's list of every id grew with
// the tenant's life. Insert and Contains are O(log ranges). Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace marlaas {

class IdRanges {
 public:
  // Adds `id`; merges it with the ranges it touches. False when it was already in.
  bool Insert(uint64_t id);
  bool Contains(uint64_t id) const;
  uint64_t size() const { return count_; }  // ids in the set
  bool empty() const { return count_ == 0; }
  // The ranges in order, each [first, last]; FromRanges takes them back (overlapping or
  // adjacent ones are merged, in any order; first > last is refused: false, and the set is
  // left empty).
  std::vector<std::pair<uint64_t, uint64_t>> Ranges() const;
  bool FromRanges(const std::vector<std::pair<uint64_t, uint64_t>>& ranges);

 private:
  std::map<uint64_t, uint64_t> ranges_;  // first -> last
  uint64_t count_ = 0;
};

}  // namespace marlaas

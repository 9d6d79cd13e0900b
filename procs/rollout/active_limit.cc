#include "procs/rollout/active_limit.h"

#include <algorithm>

namespace marlaas::rollout {

size_t ActiveLimit::OutOfMemory(size_t active) {
  good_passes_ = 0;
  ++failures_in_a_row_;
  if (active <= 1) {
    ++failures_alone_;
    limit_ = 1;
    return 0;
  }
  failures_alone_ = 0;
  // Half stay, and never more than the limit (tool results come back past it).
  limit_ = std::max<size_t>(1, std::min(limit_, active - active / 2));
  return active - limit_;
}

void ActiveLimit::GoodPass() {
  failures_alone_ = 0;
  failures_in_a_row_ = 0;
  if (limit_ >= ceiling_ || ++good_passes_ < kGrowAfter) return;
  good_passes_ = 0;
  limit_ = std::min(ceiling_, limit_ + std::max<size_t>(1, limit_ / 4));
}

}  // namespace marlaas::rollout

// ActiveLimit: how many sequences the rollout keeps in its generator at once, lowered when a
// generation pass runs out of memory and raised again slowly while passes succeed.
//
// Contract: after a pass with `active` sequences fails for memory, OutOfMemory(active) says how
// many of them to take out (the newest; the caller sets them aside and adds them back, oldest
// first, while the generator holds fewer than limit()). Half go each time (more when the batch
// was past the limit), so a batch of 96 is down to one sequence after 7 failures. With one sequence
// left nothing can go: it is tried again, and after kAloneTries failures in a row GiveUpAlone() is
// true (that completion does not fit in memory by itself: its tenant cannot be served; Reset()
// then). Every kGrowAfter good passes in a row raise the limit by a quarter (at least one), up to
// the ceiling: memory that ran short for a moment (another process) is used again. One thread uses
// it.
#pragma once

#include <cstddef>

namespace marlaas::rollout {

class ActiveLimit {
 public:
  static constexpr int kAloneTries = 3;
  static constexpr int kGrowAfter = 64;

  explicit ActiveLimit(size_t ceiling) : ceiling_(ceiling), limit_(ceiling) {}

  size_t limit() const { return limit_; }
  // A pass of `active` sequences ran out of memory: how many to take out of the generator.
  size_t OutOfMemory(size_t active);
  void GoodPass();
  bool GiveUpAlone() const { return failures_alone_ >= kAloneTries; }
  // Back to the ceiling: the sequence that did not fit alone is gone, and with it the reason to
  // hold the others to one at a time.
  void Reset() { *this = ActiveLimit(ceiling_); }
  // How many passes have failed for memory since the last good one.
  int failures_in_a_row() const { return failures_in_a_row_; }

 private:
  size_t ceiling_;
  size_t limit_;
  int good_passes_ = 0;
  int failures_alone_ = 0;
  int failures_in_a_row_ = 0;
};

}  // namespace marlaas::rollout

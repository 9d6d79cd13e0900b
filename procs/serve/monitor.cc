#include "procs/serve/monitor.h"

#include <cstdio>

#include "base/deadline.h"

namespace marlaas::serve {

Monitor::Monitor() : start_ns_(MonotonicNanos()), last_sample_ns_(start_ns_) {}

double Monitor::wall_s() const { return double(MonotonicNanos() - start_ns_) / 1e9; }

void Monitor::Sample(const Service& service) {
  const int64_t now = MonotonicNanos();
  const double dt = double(now - last_sample_ns_) / 1e9;
  UtilSample u;
  u.t_s = double(now - start_ns_) / 1e9;
  std::map<std::string, std::pair<double, int>> frac_sum;  // role -> (sum, stages)
  for (const StageView& st : service.Stages()) {
    Busy& b = busy_[st.name];
    b.role = st.role;
    double delta = 0;
    if (st.engine.started_mono_ns != b.last_started) {  // a new process: its counter restarted
      delta = double(st.engine.busy_ns) / 1e9;
      b.last_started = st.engine.started_mono_ns;
    } else if (st.engine.busy_ns >= b.last_busy) {
      delta = double(st.engine.busy_ns - b.last_busy) / 1e9;
    }
    b.last_busy = st.engine.busy_ns;
    b.total_s += delta;
    auto& [sum, n] = frac_sum[st.role];
    sum += dt > 0 ? std::min(1.0, delta / dt) : 0;
    ++n;
  }
  auto mean = [&](const char* role) {
    auto it = frac_sum.find(role);
    return it == frac_sum.end() ? 0.0 : it->second.first / it->second.second;
  };
  u.rollout = mean("rollout");
  u.trainer = mean("trainer");
  u.verifier = mean("verifier");
  last_sample_ns_ = now;
  timeline_.push_back(u);
  for (const TenantView& t : service.Tenants())
    if (t.trainer.steps > 0 && !first_reward_.count(t.record.id))
      first_reward_[t.record.id] = t.trainer.last_reward_mean;
}

double Monitor::Utilization(const std::string& role) const {
  const double wall = wall_s();
  double sum = 0;
  int n = 0;
  for (const auto& [name, b] : busy_) {
    if (b.role != role) continue;
    sum += std::min(1.0, b.total_s / std::max(wall, 1e-9));
    ++n;
  }
  return n == 0 || wall <= 0 ? 0 : sum / n;
}

std::string Monitor::Table(const Service& service) const {
  std::string out;
  char line[320];
  std::snprintf(line, sizeof(line), "%-14s %-16s %-9s %9s %7s %7s %6s %8s  %s\n", "tenant", "task",
                "state", "step", "reward", "start", "stale", "samp/s", "note");
  out += line;
  const double wall = std::max(1e-3, wall_s());
  for (const TenantView& t : service.Tenants()) {
    const TenantMetrics& tr = t.trainer;
    uint64_t max_stale = 0;
    for (int b = 0; b < kStalenessBuckets; ++b)
      if (tr.staleness[b]) max_stale = uint64_t(b);
    auto first = first_reward_.find(t.record.id);
    char step[24], start[16];
    std::snprintf(step, sizeof(step), "%llu/%u", (unsigned long long)tr.steps, t.record.max_steps);
    if (first == first_reward_.end()) {
      std::snprintf(start, sizeof(start), "-");
    } else {
      std::snprintf(start, sizeof(start), "%.2f", first->second);
    }
    std::string note = t.verifier.last_error[0] ? t.verifier.last_error
                       : tr.last_error[0]       ? tr.last_error
                                                : t.record.reason;
    std::snprintf(line, sizeof(line), "%-14s %-16s %-9s %9s %7.2f %7s %6llu %8.1f  %.60s\n",
                  t.record.id, t.record.task, TenantStateName(t.record.state), step,
                  tr.last_reward_mean, start, (unsigned long long)max_stale,
                  double(t.rollout.samples) / wall, note.c_str());
    out += line;
  }
  std::snprintf(line, sizeof(line),
                "utilisation: rollout %.0f%%  trainer %.0f%%  verifier %.0f%%   wall %.0f s\n",
                100 * Utilization("rollout"), 100 * Utilization("trainer"),
                100 * Utilization("verifier"), wall);
  out += line;
  return out;
}

}  // namespace marlaas::serve

// Monitor: what serve and the demo show while tenants train. It samples the service every call
// of Sample() and keeps per-stage busy time (utilisation = busy / wall, summed across restarts of
// a stage; a role with several processes, the rollout replicas, reports their mean), a utilisation
// timeline, and each tenant's reward at its first and latest step. Table() renders the live table.
// One thread.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "procs/serve/service.h"

namespace marlaas::serve {

struct UtilSample {
  double t_s;          // since the monitor started
  double rollout = 0;  // busy fraction over the last interval (mean over rollout replicas)
  double trainer = 0;
  double verifier = 0;
};

class Monitor {
 public:
  Monitor();
  void Sample(const Service& service);
  std::string Table(const Service& service) const;
  double Utilization(const std::string& role) const;  // over the whole run so far
  double wall_s() const;
  const std::vector<UtilSample>& timeline() const { return timeline_; }

 private:
  struct Busy {  // of one stage process (by StageView::name)
    std::string role;
    uint64_t last_busy = 0;
    int64_t last_started = 0;
    double total_s = 0;
  };
  int64_t start_ns_;
  int64_t last_sample_ns_;
  std::map<std::string, Busy> busy_;
  std::vector<UtilSample> timeline_;
  std::map<std::string, double> first_reward_;  // tenant -> reward mean at its first step
};

}  // namespace marlaas::serve

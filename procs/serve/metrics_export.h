// Metrics for operators: per tenant (step, reward mean/std, staleness, tokens/s, verifier error
// rate, adapter version) and per engine (utilisation over the run and the last interval, restarts,
// queue depths of the trajectory and scored rings in GRPO groups), rendered as Prometheus text
// (served on an optional loopback HTTP endpoint) and as one JSON object per line
// (<state-dir>/metrics.jsonl). MetricsHttp answers every request with the current text: it is a
// scrape target, not a web server. Not thread-safe: driven from the service's thread.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "procs/serve/monitor.h"
#include "procs/serve/service.h"

namespace marlaas::serve {

std::string PrometheusText(const Service& service, const Monitor& monitor);
std::string MetricsJsonLine(const Service& service, const Monitor& monitor);

class MetricsHttp {
 public:
  // Listens on 127.0.0.1:port (0: a free port, see port()).
  static Result<MetricsHttp> Listen(int port);
  MetricsHttp(MetricsHttp&& other) noexcept;
  MetricsHttp& operator=(MetricsHttp&&) = delete;
  ~MetricsHttp();
  int port() const { return port_; }
  // Answers the scrapes that are waiting (non-blocking), each with `body()`.
  void Serve(const std::function<std::string()>& body);

 private:
  MetricsHttp() = default;
  int fd_ = -1, port_ = 0;
};

}  // namespace marlaas::serve

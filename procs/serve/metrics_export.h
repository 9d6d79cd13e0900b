// Metrics for operators: per tenant (step, reward mean/std, staleness, tokens/s, verifier error
// rate, adapter version) and per engine (utilisation over the run and the last interval, restarts,
// queue depths of the trajectory and scored rings in GRPO groups), rendered as Prometheus text
// (served on an optional loopback HTTP endpoint) and as one JSON object per line
// (<state-dir>/metrics.jsonl). MetricsHttp answers every request with the current text: it is a
// scrape target, not a web server. It never blocks the service's thread on a client: sockets are
// non-blocking, each Serve() does what they allow and returns, at most kMaxClients are open (past
// that the client silent longest, one that has sent nothing, is closed for the new one; with
// none silent the new one is closed), and a client that has not sent its request head and read
// the whole reply within kClientSeconds is dropped. Not thread-safe: driven from the service's
// thread.
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
  static constexpr size_t kMaxClients = 16;
  static constexpr double kClientSeconds = 2.0;
  // Listens on 127.0.0.1:port (0: a free port, see port()).
  static Result<MetricsHttp> Listen(int port);
  MetricsHttp(MetricsHttp&& other) noexcept;
  MetricsHttp& operator=(MetricsHttp&&) = delete;
  ~MetricsHttp();
  int port() const { return port_; }
  // Accepts the clients that are waiting, reads their requests and sends their replies as far
  // as their sockets allow now, without waiting; `body()` is called at most once a call, when a
  // request is complete.
  void Serve(const std::function<std::string()>& body);
  size_t clients() const { return clients_.size(); }
  // The whole response to a request head: 200 with `body()` for GET of /metrics or / (HEAD: no
  // body), 405 for another method, 404 for another path, 400 without a request line. Pure.
  static std::string Response(const std::string& request,
                              const std::function<const std::string&()>& body);

 private:
  struct Client {
    int fd = -1;
    int64_t deadline_ns = 0;  // dropped past this (monotonic)
    std::string request;      // what came so far, until the head's blank line
    std::string reply;        // once the head is complete
    size_t sent = 0;
  };
  MetricsHttp() = default;
  // Reads and writes what `c`'s socket allows; false once it is done (answered, gone, broken).
  static bool Advance(Client* c, const std::function<const std::string&()>& reply);
  int fd_ = -1, port_ = 0;
  std::vector<Client> clients_;
};

}  // namespace marlaas::serve

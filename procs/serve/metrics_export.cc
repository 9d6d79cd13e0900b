#include "procs/serve/metrics_export.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/deadline.h"
#include "procs/serve/tenant_status.h"

namespace marlaas::serve {
namespace {

// Groups in the trajectory ring (committed by the rollout, not yet scored) and in the scored
// ring (scored, not yet retired by the trainer), summed over tenants.
std::pair<uint64_t, uint64_t> QueueDepths(const Service& service) {
  uint64_t traj = 0, scored = 0;
  for (const TenantView& v : service.Tenants()) {
    const uint64_t committed = v.rollout.groups,
                   judged = v.verifier.groups + v.verifier.verifier_errors,
                   retired = v.trainer.groups + v.trainer.groups_dropped;
    traj += committed > judged ? committed - judged : 0;
    scored += judged > retired ? judged - retired : 0;
  }
  return {traj, scored};
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

std::string PrometheusText(const Service& service, const Monitor& monitor) {
  std::string out;
  char line[512];
  auto metric = [&](const char* name, const char* help, const char* type) {
    std::snprintf(line, sizeof(line), "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    out += line;
  };
  const std::vector<TenantView> tenants = service.Tenants();
  std::vector<pb::TenantStatus> st;
  for (const TenantView& v : tenants) st.push_back(TenantStatusOf(v));
  struct Series {
    const char* name;
    const char* help;
    const char* type;
    double (*value)(const pb::TenantStatus&);
  };
  const Series series[] = {
      {"marlaas_tenant_step", "training steps done", "counter",
       [](const pb::TenantStatus& t) { return double(t.step()); }},
      {"marlaas_tenant_reward_mean", "mean reward of the last step's groups", "gauge",
       [](const pb::TenantStatus& t) { return t.reward_mean(); }},
      {"marlaas_tenant_reward_std", "std of the rewards scored so far", "gauge",
       [](const pb::TenantStatus& t) { return t.reward_std(); }},
      {"marlaas_tenant_staleness", "largest policy lag seen in trained groups", "gauge",
       [](const pb::TenantStatus& t) { return double(t.staleness()); }},
      {"marlaas_tenant_tokens_per_second", "generated tokens per second since admission", "gauge",
       [](const pb::TenantStatus& t) { return t.tokens_per_s(); }},
      {"marlaas_tenant_verifier_error_rate", "groups the verifier could not score, fraction",
       "gauge", [](const pb::TenantStatus& t) { return t.verifier_error_rate(); }},
      {"marlaas_tenant_adapter_version", "latest published adapter version", "counter",
       [](const pb::TenantStatus& t) { return double(t.adapter_version()); }},
  };
  for (const Series& s : series) {
    metric(s.name, s.help, s.type);
    for (const pb::TenantStatus& t : st) {
      std::snprintf(line, sizeof(line), "%s{tenant=\"%s\",task=\"%s\",state=\"%s\"} %.6g\n", s.name,
                    Escape(t.id()).c_str(), Escape(t.task()).c_str(), t.state().c_str(),
                    s.value(t));
      out += line;
    }
  }
  metric("marlaas_engine_utilization", "busy fraction of the engine over the whole run", "gauge");
  for (const char* role : {"rollout", "verifier", "trainer"}) {
    std::snprintf(line, sizeof(line), "marlaas_engine_utilization{engine=\"%s\"} %.6g\n", role,
                  monitor.Utilization(role));
    out += line;
  }
  metric("marlaas_engine_restarts", "times the stage process was restarted", "counter");
  for (const StageView& s : service.Stages()) {
    std::snprintf(line, sizeof(line), "marlaas_engine_restarts{engine=\"%s\"} %d\n", s.name.c_str(),
                  s.restarts);
    out += line;
  }
  const auto [traj, scored] = QueueDepths(service);
  metric("marlaas_queue_depth_groups", "GRPO groups waiting in a ring", "gauge");
  std::snprintf(line, sizeof(line),
                "marlaas_queue_depth_groups{ring=\"traj\"} %llu\n"
                "marlaas_queue_depth_groups{ring=\"scored\"} %llu\n",
                (unsigned long long)traj, (unsigned long long)scored);
  out += line;
  return out;
}

std::string MetricsJsonLine(const Service& service, const Monitor& monitor) {
  nlohmann::json j;
  j["unix_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  j["wall_s"] = monitor.wall_s();
  for (const char* role : {"rollout", "verifier", "trainer"})
    j["utilization"][role] = monitor.Utilization(role);
  if (!monitor.timeline().empty()) {
    const UtilSample& u = monitor.timeline().back();
    j["utilization_now"] = {
        {"rollout", u.rollout}, {"verifier", u.verifier}, {"trainer", u.trainer}};
  }
  const auto [traj, scored] = QueueDepths(service);
  j["queue_depth_groups"] = {{"traj", traj}, {"scored", scored}};
  j["tenants"] = nlohmann::json::array();
  for (const TenantView& v : service.Tenants()) {
    const pb::TenantStatus t = TenantStatusOf(v);
    j["tenants"].push_back({{"id", t.id()},
                            {"task", t.task()},
                            {"state", t.state()},
                            {"step", t.step()},
                            {"reward_mean", t.reward_mean()},
                            {"reward_std", t.reward_std()},
                            {"staleness", t.staleness()},
                            {"tokens_per_s", t.tokens_per_s()},
                            {"verifier_error_rate", t.verifier_error_rate()},
                            {"adapter_version", t.adapter_version()}});
  }
  return j.dump();
}

Result<MetricsHttp> MetricsHttp::Listen(int port) {
  MetricsHttp h;
  h.fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (h.fd_ < 0) return ErrnoStatus("socket", errno);
  const int one = 1;
  ::setsockopt(h.fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // loopback only: metrics are not for the network
  if (::bind(h.fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
    return ErrnoStatus("bind 127.0.0.1:" + std::to_string(port), errno);
  if (::listen(h.fd_, 16) != 0) return ErrnoStatus("listen", errno);
  socklen_t len = sizeof(a);
  ::getsockname(h.fd_, reinterpret_cast<sockaddr*>(&a), &len);
  h.port_ = ntohs(a.sin_port);
  return h;
}

MetricsHttp::MetricsHttp(MetricsHttp&& o) noexcept
    : fd_(o.fd_), port_(o.port_), clients_(std::move(o.clients_)) {
  o.fd_ = -1;
  o.clients_.clear();
}

MetricsHttp::~MetricsHttp() {
  for (const Client& c : clients_) ::close(c.fd);
  if (fd_ >= 0) ::close(fd_);
}

std::string MetricsHttp::Response(const std::string& request,
                                  const std::function<const std::string&()>& reply) {
  const std::string line = request.substr(0, request.find_first_of("\r\n"));
  const size_t sp1 = line.find(' '), sp2 = line.find(' ', sp1 == std::string::npos ? 0 : sp1 + 1);
  auto status = [](const char* what, const std::string& extra) {
    const std::string body = std::string(what) + "\n";
    return "HTTP/1.0 " + std::string(what) + "\r\nContent-Type: text/plain\r\n" + extra +
           "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
           body;
  };
  if (sp1 == std::string::npos || sp2 == std::string::npos) return status("400 Bad Request", "");
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD")
    return status("405 Method Not Allowed", "Allow: GET, HEAD\r\n");
  if (path != "/metrics" && path != "/") return status("404 Not Found", "");
  const std::string& body = reply();
  return "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         (method == "HEAD" ? std::string() : body);
}

bool MetricsHttp::Advance(Client* c, const std::function<const std::string&()>& reply) {
  constexpr size_t kMaxRequest = 8192;  // a scraper's head is a few hundred bytes
  while (c->reply.empty()) {
    char buf[2048];
    const ssize_t n = ::recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // more to come
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    c->request.append(buf, size_t(n));
    // The head is complete at its blank line; a client that sent what it had and shut its side
    // (n == 0) or sent too much is answered with what came.
    if (n == 0 || c->request.find("\r\n\r\n") != std::string::npos ||
        c->request.find("\n\n") != std::string::npos || c->request.size() >= kMaxRequest) {
      c->reply = Response(c->request, reply);
    }
  }
  while (c->sent < c->reply.size()) {
    const ssize_t n = ::send(c->fd, c->reply.data() + c->sent, c->reply.size() - c->sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // its buffer is full
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    c->sent += size_t(n);
  }
  return false;  // answered
}

void MetricsHttp::Serve(const std::function<std::string()>& make_body) {
  const int64_t now = MonotonicNanos();
  std::string body;
  bool made = false;
  auto reply = [&]() -> const std::string& {
    if (!made) body = make_body();
    made = true;
    return body;
  };
  for (int accepted = 0; accepted < 64; ++accepted) {  // a flood of connections cannot hold us
    const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) break;  // none waiting (or an error for that one client only)
    if (clients_.size() >= kMaxClients) {
      // Full: the client that has sent nothing for longest makes room (clients that connected
      // and said nothing, over and over, kept every scrape out). With none silent, the new one
      // goes: a scraper retries at its next interval.
      auto silent = clients_.end();
      for (auto it = clients_.begin(); it != clients_.end(); ++it)
        if (it->request.empty() &&
            (silent == clients_.end() || it->deadline_ns < silent->deadline_ns))
          silent = it;
      if (silent == clients_.end()) {
        ::close(fd);
        continue;
      }
      ::close(silent->fd);
      clients_.erase(silent);
    }
    clients_.push_back(Client{fd, now + int64_t(kClientSeconds * 1e9), {}, {}, 0});
    // Its request may be here already: read now, so that it is not silent when the next comes.
    if (!Advance(&clients_.back(), reply)) {
      ::close(clients_.back().fd);
      clients_.pop_back();
    }
  }
  for (size_t i = 0; i < clients_.size();) {
    Client& c = clients_[i];
    if (Advance(&c, reply) && now < c.deadline_ns) {
      ++i;
      continue;
    }
    ::close(c.fd);
    clients_.erase(clients_.begin() + std::ptrdiff_t(i));
  }
}

}  // namespace marlaas::serve

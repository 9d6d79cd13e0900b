// The metrics endpoint runs on the service's thread: no client may hold that thread. A scraper is
// answered while another client sits on a reply it never reads and a third sends nothing; those
// two are dropped after MetricsHttp::kClientSeconds; past kMaxClients a new client is closed at
// once. The endpoint serves from a forked child, as the service's loop would (Serve() about every
// 5 ms), so a Serve() that blocked shows as a scrape that never comes, not as a hung test.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "base/deadline.h"
#include "procs/serve/metrics_export.h"
#include "tests/test_util.h"

namespace marlaas::serve {
namespace {

using marlaas::testing::ChildExit;
using marlaas::testing::ForkChild;
using marlaas::testing::MapShared;
using marlaas::testing::ScopeExit;
using marlaas::testing::UnmapShared;
using marlaas::testing::WaitChildFor;

struct Shared {
  std::atomic<int> stop{0};
  std::atomic<int> clients{-1};  // the endpoint's open clients after its latest Serve()
};

// A client of 127.0.0.1:port; with `receive_buffer` set, that SO_RCVBUF (before connecting, so
// the window it advertises is small too).
int Connect(int port, int receive_buffer = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (receive_buffer > 0)
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

void SendRequest(int fd) {
  const std::string head = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
}

// Everything `fd` receives until the peer closes it, or what came within `seconds`.
std::string ReadToEnd(int fd, double seconds, bool* closed) {
  std::string out;
  *closed = false;
  const Deadline deadline = Deadline::AfterMs(int64_t(seconds * 1000));
  char buf[65536];
  while (!deadline.Expired()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) != 1) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      *closed = true;
      break;
    }
    out.append(buf, size_t(n));
  }
  return out;
}

bool WaitFor(const std::function<bool()>& done, double seconds) {
  const Deadline deadline = Deadline::AfterMs(int64_t(seconds * 1000));
  while (!deadline.Expired()) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

class MetricsHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto http = MetricsHttp::Listen(0);
    ASSERT_TRUE(http.ok()) << http.status().ToString();
    port_ = http->port();
    shared_ = MapShared<Shared>();
    // The service's loop, with a body far larger than the socket buffers hold.
    pid_ = ForkChild([this, h = std::make_shared<MetricsHttp>(std::move(*http))] {
      const std::string body(4 << 20, 'm');
      const Deadline limit = Deadline::AfterMs(60'000);
      while (shared_->stop.load() == 0 && !limit.Expired()) {
        h->Serve([&] { return body; });
        shared_->clients.store(int(h->clients()));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return 0;
    });
  }
  void TearDown() override {
    shared_->stop.store(1);
    if (pid_ > 0) {
      const ChildExit e = WaitChildFor(pid_, 10);
      EXPECT_TRUE(e.exited && e.code == 0) << "the endpoint's loop did not end (blocked?)";
    }
    UnmapShared(shared_);
  }
  // A scrape: the reply's head and its 4 MiB body, then the close.
  void ExpectScrapeAnswered(const char* what) {
    const int fd = Connect(port_);
    ScopeExit close_it([fd] { ::close(fd); });
    SendRequest(fd);
    bool closed = false;
    const std::string reply = ReadToEnd(fd, 20, &closed);
    EXPECT_TRUE(closed) << what;
    EXPECT_EQ(reply.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << what;
    const size_t body_at = reply.find("\r\n\r\n");
    ASSERT_NE(body_at, std::string::npos) << what;
    EXPECT_EQ(reply.size() - body_at - 4, size_t(4 << 20)) << what;
    EXPECT_NE(reply.find("Content-Length: 4194304\r\n"), std::string::npos) << what;
  }

  pid_t pid_ = -1;
  int port_ = 0;
  Shared* shared_ = nullptr;
};

// Only a scrape gets the metrics: another method or path is refused with its status (any
// request got 200 and the metrics).
TEST(MetricsHttpResponseTest, OnlyGetOrHeadOfTheMetricsPathIsAnswered) {
  const std::string body = "marlaas_up 1\n";
  const auto get = [&]() -> const std::string& { return body; };
  const auto answer = [&](const std::string& request) {
    return MetricsHttp::Response(request, get);
  };
  for (const char* ok : {"GET /metrics HTTP/1.0\r\n\r\n", "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                         "GET /metrics?name=x HTTP/1.0\n\n"}) {
    const std::string r = answer(ok);
    EXPECT_EQ(r.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << ok;
    EXPECT_EQ(r.substr(r.size() - body.size()), body) << ok;
  }
  const std::string head = answer("HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.0 200 OK\r\n", 0), 0u);
  EXPECT_EQ(head.find(body), std::string::npos);
  EXPECT_NE(head.find("Content-Length: " + std::to_string(body.size())), std::string::npos);
  const std::string post = answer("POST /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(post.rfind("HTTP/1.0 405 Method Not Allowed\r\n", 0), 0u) << post;
  EXPECT_NE(post.find("Allow: GET, HEAD\r\n"), std::string::npos) << post;
  EXPECT_EQ(answer("GET /nope HTTP/1.0\r\n\r\n").rfind("HTTP/1.0 404 Not Found\r\n", 0), 0u);
  EXPECT_EQ(answer("hello\r\n\r\n").rfind("HTTP/1.0 400 Bad Request\r\n", 0), 0u);
  for (const char* refused : {"POST /metrics HTTP/1.0\r\n\r\n", "GET /nope HTTP/1.0\r\n\r\n"})
    EXPECT_EQ(answer(refused).find(body), std::string::npos) << refused;
}

TEST_F(MetricsHttpTest, AClientThatNeverReadsOrNeverAsksHoldsNoOneAndIsDropped) {
  // Asks, then reads nothing: its reply stops at a full socket buffer.
  const int stuck = Connect(port_, /*receive_buffer=*/4096);
  ScopeExit close_stuck([stuck] { ::close(stuck); });
  SendRequest(stuck);
  // Connects and sends nothing.
  const int silent = Connect(port_);
  ScopeExit close_silent([silent] { ::close(silent); });
  ASSERT_TRUE(WaitFor([&] { return shared_->clients.load() == 2; }, 10));
  ExpectScrapeAnswered("a scrape beside a stuck and a silent client");
  // Both are dropped once their time is up; the stuck one got part of its reply, then the close.
  ASSERT_TRUE(
      WaitFor([&] { return shared_->clients.load() == 0; }, 10 + 2 * MetricsHttp::kClientSeconds));
  bool closed = false;
  const std::string partial = ReadToEnd(stuck, 10, &closed);
  EXPECT_TRUE(closed);
  EXPECT_LT(partial.size(), size_t(4 << 20));
  EXPECT_EQ(ReadToEnd(silent, 10, &closed), "");
  EXPECT_TRUE(closed);
}

// Past the cap a scrape is answered: a client that has sent nothing makes room (24 threads that
// connected, said nothing and connected again kept every scrape out). With every client busy
// (asked, reading nothing), a new one is closed at once.
TEST_F(MetricsHttpTest, PastTheClientCapASilentClientMakesRoomAndABusyOneDoesNot) {
  std::vector<int> held;
  ScopeExit close_all([&] {
    for (int fd : held) ::close(fd);
  });
  for (size_t i = 0; i < MetricsHttp::kMaxClients; ++i) held.push_back(Connect(port_));
  ASSERT_TRUE(
      WaitFor([&] { return shared_->clients.load() == int(MetricsHttp::kMaxClients); }, 10));
  ExpectScrapeAnswered("a scrape past the cap of silent clients");
  bool closed = false;
  EXPECT_EQ(ReadToEnd(held[0], 5, &closed), "");
  EXPECT_TRUE(closed) << "the first silent client was not the one closed";
  for (int fd : held) ::close(fd);
  held.clear();
  ASSERT_TRUE(WaitFor([&] { return shared_->clients.load() == 0; }, 10));
  // Busy ones: each asked and reads nothing (its reply stops at a small receive buffer).
  for (size_t i = 0; i < MetricsHttp::kMaxClients; ++i) {
    held.push_back(Connect(port_, /*receive_buffer=*/4096));
    SendRequest(held.back());
  }
  ASSERT_TRUE(
      WaitFor([&] { return shared_->clients.load() == int(MetricsHttp::kMaxClients); }, 10));
  const int extra = Connect(port_);
  ScopeExit close_extra([extra] { ::close(extra); });
  SendRequest(extra);
  closed = false;
  EXPECT_EQ(ReadToEnd(extra, 10, &closed), "");
  EXPECT_TRUE(closed) << "a client past a cap of busy ones was kept waiting";
}

}  // namespace
}  // namespace marlaas::serve

// The control socket without the pipeline behind it: frames assembled from any split, fuzzed and
// oversized frames closing only their own connection, many clients at once, and tokens.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "base/file_util.h"
#include "base/host_memory.h"
#include "bench/sim/measured_run.h"
#include "procs/cli/base_model.h"
#include "procs/cli/cli.h"
#include "procs/cli/control_client.h"
#include "procs/common/tenant_error.h"
#include "procs/serve/admission.h"
#include "procs/serve/control_frame.h"
#include "procs/serve/control_server.h"
#include "procs/serve/tenant_status.h"
#include "procs/serve/tokens.h"
#include "tests/test_util.h"

namespace marlaas::serve {
namespace {

namespace fs = std::filesystem;

TEST(ControlFrameTest, FramesAreAssembledFromAnySplit) {
  const std::string a = "first", b(70000, 'b'), c;
  std::string wire = *EncodeFrame(a) + *EncodeFrame(b) + *EncodeFrame(c);
  std::mt19937 rng(7);
  FrameReader r;
  std::vector<std::string> got;
  size_t at = 0;
  while (at < wire.size()) {
    const size_t n = std::min(wire.size() - at, size_t(1 + rng() % 9000));
    r.Feed(wire.data() + at, n);
    at += n;
    for (;;) {
      auto f = r.Next();
      ASSERT_TRUE(f.ok());
      if (!f->has_value()) break;
      got.push_back(**f);
    }
  }
  EXPECT_EQ(got, (std::vector<std::string>{a, b, c}));
  EXPECT_EQ(r.pending(), 0u);
}

TEST(ControlFrameTest, OversizedFramesAreRefusedBeforeReading) {
  EXPECT_FALSE(EncodeFrame(std::string(kMaxControlFrame + 1, 'x')).ok());
  FrameReader r;
  const unsigned char huge[4] = {0xff, 0xff, 0xff, 0x7f};
  r.Feed(reinterpret_cast<const char*>(huge), 4);
  auto f = r.Next();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("over the maximum"), std::string::npos);
}

// A server on its own thread answering with the request id and the command's tenant.
class ServerThread {
 public:
  explicit ServerThread(const std::string& dir, int idle_timeout_ms = 60'000,
                        int frame_deadline_ms = 10'000) {
    auto s = ControlServer::Listen(dir + "/control.sock", idle_timeout_ms, frame_deadline_ms);
    if (!s.ok()) {  // no server: the test's calls fail
      ADD_FAILURE() << s.status().ToString();
      return;
    }
    server_.emplace(std::move(s).value());
    thread_ = std::thread([this] {
      while (!stop_) {
        server_->Poll(20, [this](const pb::ControlRequest& r) {
          ++handled_;
          pb::ControlReply reply;
          reply.set_request_id(r.request_id());
          reply.set_ok(true);
          reply.mutable_logs()->add_lines(r.stop().tenant());
          return reply;
        });
      }
    });
  }
  ~ServerThread() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int handled() const { return handled_; }
  size_t connections() const { return server_ ? server_->connections() : 0; }

 private:
  std::optional<ControlServer> server_;
  std::atomic<bool> stop_{false};
  std::atomic<int> handled_{0};
  std::thread thread_;
};

pb::ControlRequest StopRequest(uint64_t id, const std::string& tenant) {
  pb::ControlRequest r;
  r.set_request_id(id);
  r.mutable_stop()->set_tenant(tenant);
  return r;
}

int Connect(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// A bare listening socket at `path` (a stand-in service that the test drives by hand); -1 when
// it cannot be made.
int Listen(const std::string& path, int backlog) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::listen(fd, backlog) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

TEST(ControlServerTest, TheSocketIsPrivateAndASecondServiceIsRefused) {
  const testing::ScopedTempDir tmp("ctl-mode");
  const std::string& dir = tmp.path();
  ServerThread server(dir);
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/control.sock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto second = ControlServer::Listen(dir + "/control.sock");
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("already listening"), std::string::npos);
}

TEST(ControlServerTest, FuzzedFramesCloseOnlyTheirConnection) {
  const testing::ScopedTempDir tmp("ctl-fuzz");
  const std::string& dir = tmp.path();
  ServerThread server(dir);
  const std::string path = dir + "/control.sock";
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; ++i) {
    const int fd = Connect(path);
    std::string junk;
    switch (i % 4) {
      case 0:  // random bytes
        junk.resize(1 + rng() % 3000);
        for (char& c : junk) c = char(rng());
        break;
      case 1:  // a huge declared length
        junk = std::string("\xff\xff\xff\xff", 4) + "xyz";
        break;
      case 2:  // a frame cut short, then hang up
        junk = EncodeFrame(StopRequest(1, "t").SerializeAsString())->substr(0, 5);
        break;
      case 3:  // a whole frame that is not a ControlRequest
        junk = *EncodeFrame(std::string("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11));
        break;
    }
    (void)!::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    ::close(fd);
  }
  // A well-behaved client is still answered, and the bad connections are gone.
  auto reply = cli::CallService(dir, StopRequest(99, "still-here"), 10000);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->request_id(), 99u);
  EXPECT_EQ(reply->logs().lines(0), "still-here");
  for (int i = 0; i < 100 && server.connections() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(server.connections(), 0u);
}

// At the connection cap a new client is answered: the connection silent longest is closed to make
// room (193 clients that connected and said nothing kept every status call out for 60 s).
TEST(ControlServerTest, AtTheConnectionCapANewClientTakesTheSlotOfTheSilentest) {
  const testing::ScopedTempDir tmp("ctl-cap");
  const std::string& dir = tmp.path();
  ServerThread server(dir);
  const std::string path = dir + "/control.sock";
  std::vector<int> idle;
  for (int i = 0; i < 128; ++i) {
    idle.push_back(Connect(path));
    if (i == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the silentest
  }
  for (int i = 0; i < 500 && server.connections() < 128; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(server.connections(), 128u);
  auto reply = cli::CallService(dir, StopRequest(7, "let-in"), 10000);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->logs().lines(0), "let-in");
  const timeval limit{10, 0};
  ::setsockopt(idle[0], SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char b;
  EXPECT_EQ(::recv(idle[0], &b, 1, 0), 0) << "the first (silentest) connection was closed";
  for (int fd : idle) ::close(fd);
}

// The next `n` replies on `fd` (a FrameReader of the test's own: ReadFrame keeps no bytes past
// its frame), or fewer when 10 s pass.
std::vector<pb::ControlReply> ReadReplies(int fd, size_t n) {
  std::vector<pb::ControlReply> out;
  FrameReader reader;
  const timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  while (out.size() < n) {
    auto frame = reader.Next();
    if (frame.ok() && frame->has_value()) {
      out.emplace_back();
      out.back().ParseFromString(**frame);
      continue;
    }
    char buf[4096];
    const ssize_t got = ::recv(fd, buf, sizeof(buf), 0);
    if (got <= 0) break;
    reader.Feed(buf, size_t(got));
  }
  return out;
}

// One request at a time per connection, its reply written before the next is taken: a client
// that sends 20 requests at once still gets 20 replies, in order.
TEST(ControlServerTest, PipelinedRequestsAreAnsweredInOrder) {
  const testing::ScopedTempDir tmp("ctl-pipe");
  ServerThread server(tmp.path());
  const int fd = Connect(tmp.path() + "/control.sock");
  std::string burst;
  for (uint64_t i = 0; i < 20; ++i)
    burst += *EncodeFrame(StopRequest(i, "r" + std::to_string(i)).SerializeAsString());
  ASSERT_EQ(::send(fd, burst.data(), burst.size(), MSG_NOSIGNAL), ssize_t(burst.size()));
  const std::vector<pb::ControlReply> replies = ReadReplies(fd, 20);
  ASSERT_EQ(replies.size(), 20u);
  for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(replies[i].request_id(), i);
  EXPECT_EQ(server.handled(), 20);
  ::close(fd);
}

// A frame sent a byte at a time, each byte well within the idle timeout, is closed once it is not
// whole within the frame deadline (a byte every 40 s from 135 clients blocked the socket); a
// frame that is not a ControlRequest (a token with a byte that is not UTF-8) gets an error reply
// on a connection that stays usable.
TEST(ControlServerTest, ATrickledFrameIsClosedAtItsDeadlineAndANonRequestIsAnswered) {
  const testing::ScopedTempDir tmp("ctl-slow");
  ServerThread server(tmp.path(), /*idle_timeout_ms=*/60'000, /*frame_deadline_ms=*/1000);
  const std::string path = tmp.path() + "/control.sock";
  const int slow = Connect(path);
  const std::string frame = *EncodeFrame(StopRequest(1, "slow").SerializeAsString());
  const auto start = std::chrono::steady_clock::now();
  bool closed = false;
  for (size_t k = 0; k + 1 < frame.size() && !closed; ++k) {
    closed = ::send(slow, frame.data() + k, 1, MSG_NOSIGNAL) != 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) break;
    char b;
    closed = closed || ::recv(slow, &b, 1, MSG_DONTWAIT) == 0;
  }
  EXPECT_TRUE(closed) << "a frame trickled for " << frame.size() / 4 << " s was kept";
  EXPECT_EQ(server.handled(), 0);
  ::close(slow);

  pb::ControlRequest bad = StopRequest(2, "x");
  bad.set_token("\xff\xfe");  // set on the message, not checked until it is serialised
  std::string bytes;
  bad.SerializePartialToString(&bytes);
  const int fd = Connect(path);
  const std::string both =
      *EncodeFrame(bytes) + *EncodeFrame(StopRequest(3, "after").SerializeAsString());
  ASSERT_EQ(::send(fd, both.data(), both.size(), MSG_NOSIGNAL), ssize_t(both.size()));
  const std::vector<pb::ControlReply> replies = ReadReplies(fd, 2);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_NE(replies[0].error().find("not a valid ControlRequest"), std::string::npos)
      << replies[0].error();
  ASSERT_EQ(replies[1].logs().lines_size(), 1);
  EXPECT_EQ(replies[1].logs().lines(0), "after");
  ::close(fd);
}

// A service that stopped accepting (hung) with its queue of connections full: the client gives up
// at its deadline with that reason instead of waiting in connect() for ever. The call runs in a
// child, so a connect() that blocked would show as a child killed at the test's bound.
TEST(ControlClientTest, AFullQueueOfAServiceThatAcceptsNothingTimesOutTheCall) {
  const testing::ScopedTempDir tmp("ctl-full");
  const std::string path = tmp.path() + "/control.sock";
  const int listener = Listen(path, 0);  // a queue of one
  ASSERT_GE(listener, 0);
  testing::ScopeExit close_listener([listener] { ::close(listener); });
  const int queued = Connect(path);  // fills it; never accepted
  testing::ScopeExit close_queued([queued] { ::close(queued); });
  const pid_t child = testing::ForkChild([&] {
    auto reply = cli::CallService(tmp.path(), StopRequest(7, "never"), 500);
    if (reply.ok()) return 1;
    if (reply.status().code() != StatusCode::kTimeout) return 2;
    return reply.status().message().find("accepted no connection within 500 ms") ==
                   std::string::npos
               ? 3
               : 0;
  });
  const testing::ChildExit e = testing::WaitChildFor(child, 20);
  EXPECT_FALSE(e.timed_out) << "the call waited in connect() past its deadline";
  EXPECT_TRUE(e.exited && e.code == 0) << "code " << e.code << " (1: answered, 2: not a timeout, "
                                       << "3: the message does not say why)";
}

// The socket file removed (or replaced) while the service runs: the service makes it again, so
// clients find it (they were told to start a service, which the state dir's lock refused).
TEST(ControlServerTest, ARemovedSocketFileIsMadeAgain) {
  const testing::ScopedTempDir tmp("ctl-gone");
  ServerThread server(tmp.path());
  const std::string path = tmp.path() + "/control.sock";
  ::testing::internal::CaptureStderr();
  for (const bool replace : {false, true}) {
    ASSERT_EQ(::unlink(path.c_str()), 0);
    if (replace) {
      ASSERT_TRUE(WriteFileAtomically(path, "not a socket").ok());
    }
    const auto gone = std::chrono::steady_clock::now();
    Result<pb::ControlReply> reply = Status(StatusCode::kUnavailable, "not yet");
    while (!reply.ok() && std::chrono::steady_clock::now() - gone < std::chrono::seconds(10)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      reply = cli::CallService(tmp.path(), StopRequest(3, "back"), 2000);
    }
    ASSERT_TRUE(reply.ok()) << replace << ": " << reply.status().ToString();
    EXPECT_EQ(reply->logs().lines(0), "back");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("the control socket " + path + " was gone; made it again"), std::string::npos)
      << err;
}

// A service that takes the connection and goes away before it answers (stopped by SIGTERM, say):
// the caller learns that the outcome is unknown and how to find it, whether the service read the
// request first (an end of file) or not (a reset: the client saw only "Connection reset by
// peer").
TEST(ControlClientTest, AServiceThatClosesBeforeAnsweringLeavesTheOutcomeUnknown) {
  for (const bool read_first : {true, false}) {
    const testing::ScopedTempDir tmp("ctl-cut");
    const int listener = Listen(tmp.path() + "/control.sock", 4);
    ASSERT_GE(listener, 0);
    testing::ScopeExit close_listener([listener] { ::close(listener); });
    std::thread service([listener, read_first] {
      const int c = ::accept(listener, nullptr, nullptr);
      if (c < 0) return;
      if (read_first) {
        (void)serve::ReadFrame(c, serve::Clock::now() + std::chrono::seconds(10));
      } else {  // the request still unread when it closes: a reset
        pollfd p{c, POLLIN, 0};
        (void)::poll(&p, 1, 10000);
      }
      ::close(c);
    });
    auto reply = cli::CallService(tmp.path(), StopRequest(7, "cut"), 10000);
    service.join();
    ASSERT_FALSE(reply.ok()) << read_first;
    EXPECT_EQ(reply.status().code(), StatusCode::kUnavailable) << reply.status().ToString();
    EXPECT_NE(reply.status().message().find("closed the connection before it answered"),
              std::string::npos)
        << reply.status().ToString();
    EXPECT_NE(reply.status().message().find("whether the request took effect is unknown"),
              std::string::npos)
        << reply.status().ToString();
  }
}

// Connections on which nothing moves for the idle timeout are closed (a quiet one, one that
// stopped in the middle of a frame), each client sees its end of the socket close, and a client
// that sends its request and reads its reply is answered as before.
TEST(ControlServerTest, QuietConnectionsAreClosedAfterTheIdleTimeout) {
  const testing::ScopedTempDir tmp("ctl-idle");
  const std::string& dir = tmp.path();
  constexpr int kIdleMs = 2000;
  ServerThread server(dir, kIdleMs);
  const std::string path = dir + "/control.sock";
  const auto connected = std::chrono::steady_clock::now();
  const int quiet = Connect(path);
  const int half = Connect(path);
  const std::string frame = *EncodeFrame(StopRequest(1, "t").SerializeAsString());
  ASSERT_EQ(::send(half, frame.data(), 5, MSG_NOSIGNAL), 5);
  for (int i = 0; i < 100 && server.connections() < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(server.connections(), 2u);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Checked only while less than the idle timeout has passed since the connects (a stalled
  // test process may wake up later than that).
  const size_t open = server.connections();
  if (std::chrono::steady_clock::now() - connected < std::chrono::milliseconds(kIdleMs)) {
    EXPECT_EQ(open, 2u) << "closed before its idle timeout";
  }
  for (int i = 0; i < 3000 && server.connections() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(server.connections(), 0u);
  for (int fd : {quiet, half}) {
    // Bounded: a server that kept the connection open fails the test instead of hanging it.
    const timeval limit{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    char b;
    EXPECT_EQ(::recv(fd, &b, 1, 0), 0) << "the server's end is closed";
    ::close(fd);
  }
  auto reply = cli::CallService(dir, StopRequest(5, "active"), 10000);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(reply->logs().lines(0), "active");
  EXPECT_EQ(server.handled(), 1);
}

TEST(ControlServerTest, ManyClientsAtOnceEachGetTheirOwnReplies) {
  const testing::ScopedTempDir tmp("ctl-many");
  const std::string& dir = tmp.path();
  ServerThread server(dir);
  constexpr int kClients = 16, kEach = 25;
  std::atomic<int> right{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < kEach; ++i) {
        const uint64_t id = uint64_t(c) * 1000 + uint64_t(i);
        const std::string tenant = "t" + std::to_string(id);
        auto reply = cli::CallService(dir, StopRequest(id, tenant), 10000);
        if (reply.ok() && reply->request_id() == id && reply->logs().lines(0) == tenant) ++right;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(right.load(), kClients * kEach);
  EXPECT_EQ(server.handled(), kClients * kEach);
}

TEST(TokensTest, AdminAndTenantTokensAreSeparateAndPersist) {
  const testing::ScopedTempDir tmp("tokens");
  const std::string& dir = tmp.path();
  fs::create_directories(dir + "/tenants/alice");
  fs::create_directories(dir + "/tenants/bob");
  auto tokens = Tokens::Open(dir);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/admin.token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string alice = *tokens->Issue("alice"), bob = *tokens->Issue("bob");
  ASSERT_EQ(::stat((dir + "/tenants/alice/token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(alice.size(), 32u);
  EXPECT_NE(alice, bob);
  EXPECT_TRUE(tokens->Allows(alice, "alice"));
  EXPECT_FALSE(tokens->Allows(alice, "bob"));
  EXPECT_FALSE(tokens->Allows("", "alice"));
  EXPECT_FALSE(tokens->Allows(alice.substr(0, 31) + "x", "alice"));
  EXPECT_TRUE(tokens->Allows(tokens->admin(), "bob"));
  // Ids that are not tenant ids are refused before any path is built from them.
  std::ofstream(dir + "/token") << alice;
  EXPECT_FALSE(tokens->Allows(alice, ".."));
  EXPECT_FALSE(tokens->Allows(tokens->admin(), "../tenants/alice"));
  EXPECT_FALSE(tokens->Issue("../escape").ok());
  EXPECT_FALSE(tokens->IsAdmin(alice));
  // A restarted service reads the same tokens.
  auto again = Tokens::Open(dir);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->admin(), tokens->admin());
  EXPECT_TRUE(again->Allows(bob, "bob"));
  EXPECT_EQ(cli::ResolveToken(dir, ""), tokens->admin());
  EXPECT_EQ(cli::ResolveToken(dir, "explicit"), "explicit");
}

// `status` keeps settled tenants from their status.json (also one written before a restart);
// a tenant with a final state but no readable status.json still shows its state and reason.
TEST(SettledStatusTest, SettledTenantsAreReadBackFromTheStateDir) {
  const testing::ScopedTempDir tmp("settled");
  const std::string& dir = tmp.path();
  for (const char* id : {"done", "legacy", "torn", "running", "skipped"})
    fs::create_directories(dir + "/tenants/" + id);
  pb::TenantStatus done;
  done.set_id("done");
  done.set_task("countdown");
  done.set_state("finished");
  done.set_step(12);
  done.set_reward_mean(0.75);
  ASSERT_TRUE(WriteSettledStatus(dir + "/tenants/done", done).ok());
  std::ofstream(dir + "/tenants/done/state") << "finished\n";
  std::ofstream(dir + "/tenants/legacy/state") << "failed: verifier: exit code 3\n";
  std::ofstream(dir + "/tenants/legacy/job.json")
      << "{\"tenant\":\"legacy\",\"task\":\"arithmetic\"}";
  std::ofstream(dir + "/tenants/torn/state") << "stopped: stopped by its owner\n";
  std::ofstream(dir + "/tenants/torn/status.json") << "{\"id\": \"torn\", \"st";
  std::ofstream(dir + "/tenants/torn/steps.jsonl")
      << R"({"step": 6, "version": 7, "reward_mean": 0.25})"
      << "\n"
      << R"({"step": 7, "version": 8, "reward_mean": 0.5})"
      << "\n"
      << R"({"step": 8, "vers)";  // a line torn by a crash
  std::ofstream(dir + "/tenants/running/job.json") << "{}";
  std::ofstream(dir + "/tenants/skipped/state") << "finished\n";

  const auto all = SettledTenantsOnDisk(dir, {"skipped"});
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id(), "done");
  EXPECT_EQ(all[0].step(), 12u);
  EXPECT_DOUBLE_EQ(all[0].reward_mean(), 0.75);
  EXPECT_EQ(all[0].task(), "countdown");
  EXPECT_EQ(all[1].id(), "legacy");
  EXPECT_EQ(all[1].state(), "failed");
  EXPECT_EQ(all[1].reason(), "verifier: exit code 3");
  EXPECT_EQ(all[1].task(), "arithmetic");
  EXPECT_EQ(all[2].id(), "torn");
  EXPECT_EQ(all[2].state(), "stopped");
  // Not zeros that look like results: the last whole step, and the damage named.
  EXPECT_EQ(all[2].step(), 7u);
  EXPECT_EQ(all[2].adapter_version(), 8u);
  EXPECT_DOUBLE_EQ(all[2].reward_mean(), 0.5);
  EXPECT_EQ(all[2].reason(), "stopped by its owner; " + dir +
                                 "/tenants/torn/status.json is damaged: step, reward and version "
                                 "are from steps.jsonl");
}

// A reason quoting a verifier's stderr, or cut at a byte limit inside a character, is not valid
// UTF-8; protobuf refuses to parse a `string` field that is not, so one such tenant made every
// `status` reply unreadable. The reply carries it with U+FFFD instead.
// `status --json` is for scripts: counters are JSON numbers (proto3 JSON writes 64-bit ones as
// strings, and jq's "12" > 10 is true whatever the step). A status.json that an earlier build
// wrote with strings still reads back.
TEST(SettledStatusTest, StatusJsonGivesCountersAsNumbersAndOldFilesStillRead) {
  pb::StatusReply reply;
  pb::TenantStatus* t = reply.add_tenants();
  t->set_id("a");
  t->set_step(12);
  t->set_adapter_version(7);
  const nlohmann::json j = nlohmann::json::parse(cli::StatusReplyJson(reply));
  ASSERT_TRUE(j["tenants"][0]["step"].is_number_unsigned()) << j.dump();
  EXPECT_EQ(j["tenants"][0]["step"].get<int>(), 12);
  ASSERT_TRUE(j["tenants"][0]["adapter_version"].is_number_unsigned()) << j.dump();
  EXPECT_EQ(j["tenants"][0]["adapter_version"].get<int>(), 7);
  EXPECT_TRUE(j["tenants"][0]["reward_mean"].is_number()) << j.dump();  // present when 0 too
  const testing::ScopedTempDir tmp("settled-old");
  fs::create_directories(tmp.path() + "/tenants/old");
  std::ofstream(tmp.path() + "/tenants/old/state") << "finished\n";
  std::ofstream(tmp.path() + "/tenants/old/status.json")
      << R"({"id": "old", "task": "arithmetic", "state": "finished", "step": "40",)"
      << R"( "adapter_version": "41"})";
  const auto old = SettledTenantsOnDisk(tmp.path(), {});
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].step(), 40u);
  EXPECT_EQ(old[0].adapter_version(), 41u);
}

TEST(SettledStatusTest, AReasonThatIsNotUtf8StillGivesAReadableReply) {
  TenantView v{};
  std::snprintf(v.record.id, sizeof(v.record.id), "utf");
  std::snprintf(v.record.reason, sizeof(v.record.reason), "verifier: caf\xc3\xa9 \xff caf\xc3");
  pb::ControlReply reply;
  reply.set_ok(true);
  *reply.mutable_status()->add_tenants() = TenantStatusOf(v);
  pb::ControlReply back;
  ASSERT_TRUE(back.ParseFromString(reply.SerializeAsString()));
  EXPECT_EQ(back.status().tenants(0).reason(),
            "verifier: caf\xc3\xa9 \xef\xbf\xbd caf\xef\xbf\xbd");
  const testing::ScopedTempDir tmp("utf8");
  const std::string& dir = tmp.path();
  fs::create_directories(dir + "/tenants/old");
  std::ofstream(dir + "/tenants/old/state") << "failed: exit \xfe\n";
  const auto settled = SettledTenantsOnDisk(dir, {});
  ASSERT_EQ(settled.size(), 1u);
  pb::ControlReply listing;
  *listing.mutable_status()->add_tenants() = settled[0];
  ASSERT_TRUE(back.ParseFromString(listing.SerializeAsString()));
  EXPECT_EQ(back.status().tenants(0).reason(), "exit \xef\xbf\xbd");
}

// Numeric flags are parsed strictly: junk, a trailing suffix or an out-of-range value is refused
// with the flag named (serve then exits with 2 before starting anything).
// serve's default budget: what this host can hold, less the base weights of each process that
// loads them on the host; weights larger than the host leave no room (every tenant refused).
TEST(AdmissionTest, TheDefaultBudgetIsTheHostLessTheBaseWeightsInEachModelProcess) {
  const HostMemory host = UsableHostMemory();
  ASSERT_GT(host.bytes, uint64_t(32) << 20);
  // A safetensors file of `bytes` whose tensors are `dtype` (sparse: its data is not written).
  auto weights = [](const std::string& path, const char* dtype, uint64_t bytes) {
    const std::string header =
        std::string(R"({"w":{"dtype":")") + dtype + R"(","shape":[1],"data_offsets":[0,4]}})";
    std::ofstream f(path, std::ios::binary);
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) f.put(char((n >> (8 * i)) & 0xff));
    f << header;
    f.close();
    ASSERT_EQ(::truncate(path.c_str(), off_t(bytes)), 0);
  };
  // f32: mapped and shared by the model processes, so counted once.
  const testing::ScopedTempDir f32("f32");
  weights(f32.path() + "/model-00001-of-00002.safetensors", "F32", 3 << 20);
  weights(f32.path() + "/model-00002-of-00002.safetensors", "F32", 1 << 20);
  weights(f32.path() + "/tokenizer.json", "F32", 5 << 20);  // not weights
  MemoryBudget b = DefaultMemoryBudget(f32.path(), 2);
  EXPECT_EQ(b.bytes, host.bytes - (uint64_t(4) << 20));
  EXPECT_NE(b.source.find("less the base model's 4 MiB as f32, mapped once for its 2 model "
                          "processes"),
            std::string::npos)
      << b.source;
  EXPECT_NE(b.source.find("--memory-budget-mb"), std::string::npos) << b.source;
  // bf16: converted to f32 (twice the size) in each process.
  const testing::ScopedTempDir bf16("bf16");
  weights(bf16.path() + "/model.safetensors", "BF16", 4 << 20);
  b = DefaultMemoryBudget(bf16.path(), 2);
  EXPECT_EQ(b.bytes, host.bytes - (uint64_t(16) << 20));
  EXPECT_NE(b.source.find("8 MiB as f32, in each of 2 model processes"), std::string::npos)
      << b.source;
  EXPECT_EQ(DefaultMemoryBudget(bf16.path(), 0).bytes, host.bytes);  // no model process
  weights(bf16.path() + "/model.safetensors", "BF16", host.bytes);   // more than the host
  EXPECT_EQ(DefaultMemoryBudget(bf16.path(), 1).bytes, 1u);
}

// A stage's error for a tenant: cut in the metrics record, whole in the tenant's dir, and serve
// takes the whole text only when it continues the cut one (not an older error's file).
TEST(TenantErrorTest, TheWholeErrorIsTakenOnlyWhenItContinuesTheCutOne) {
  const testing::ScopedTempDir dir("tenant");
  TenantMetrics m{};
  const std::string whole = "verifier failed: " + std::string(300, 'x') + " the end";
  pipeline::SetTenantError(dir.path(), "verifier", whole, &m);
  const std::string cut = m.last_error;
  EXPECT_EQ(cut.size(), sizeof(m.last_error) - 1);
  EXPECT_EQ(pipeline::FullTenantError(dir.path(), "verifier", cut), whole);
  EXPECT_EQ(pipeline::FullTenantError(dir.path(), "trainer", cut), cut);  // no file of its own
  EXPECT_EQ(pipeline::FullTenantError(dir.path(), "verifier", "another error"), "another error");
  pipeline::SetTenantError(dir.path(), "rollout", std::string(10000, 'y'), &m);
  EXPECT_EQ(ReadFile(dir.path() + "/rollout.error")->size(), pipeline::kTenantErrorBytes);
  // Over (the step or save went through since): neither the record nor the file shows it.
  pipeline::ClearTenantError(dir.path(), "rollout", &m);
  EXPECT_EQ(m.last_error[0], '\0');
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/rollout.error"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/verifier.error"));  // another stage's
}

TEST(CommandLineTest, NumericFlagsAreCheckedAndNamed) {
  std::vector<std::string> args = {"--max-tenants", "12", "--timeout-s=2.5", "rest"};
  long long n = 0;
  double x = 0;
  ASSERT_TRUE(cli::TakeInteger(&args, "serve", "--max-tenants", 1, 256, &n));
  ASSERT_TRUE(cli::TakeNumber(&args, "serve", "--timeout-s", 1, 10, &x));
  EXPECT_EQ(n, 12);
  EXPECT_DOUBLE_EQ(x, 2.5);
  EXPECT_EQ(args, std::vector<std::string>{"rest"});
  long long absent = 7;
  ASSERT_TRUE(cli::TakeInteger(&args, "serve", "--threads", 1, 8, &absent));
  EXPECT_EQ(absent, 7);
  for (const char* bad : {"abc", "12x", "0", "257", "1.5", " 5", "+5", "5 ", "0x10", "1-2"}) {
    std::vector<std::string> a = {"--max-tenants", bad};
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(cli::TakeInteger(&a, "serve", "--max-tenants", 1, 256, &n)) << bad;
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("--max-tenants: '" + std::string(bad) + "'"), std::string::npos) << err;
  }
  for (const char* bad : {" 2", "+2", "0x2", "0x1p1", "inf", "2e"}) {
    std::vector<std::string> a = {"--timeout-s", bad};
    ::testing::internal::CaptureStderr();
    EXPECT_FALSE(cli::TakeNumber(&a, "serve", "--timeout-s", 1, 10, &x)) << bad;
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("--timeout-s: '" + std::string(bad) + "'"), std::string::npos) << err;
  }
  // An empty value is not taken: it stays for RejectRest, which names the option.
  for (std::vector<std::string> a : {std::vector<std::string>{"--max-tenants", ""},
                                     std::vector<std::string>{"--max-tenants="}}) {
    const std::vector<std::string> given = a;
    n = 3;
    EXPECT_TRUE(cli::TakeInteger(&a, "serve", "--max-tenants", 1, 256, &n));
    EXPECT_EQ(n, 3);
    EXPECT_EQ(a, given);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(cli::RejectRest("serve", a), 2);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("marlaas serve: --max-tenants is empty"), std::string::npos) << err;
  }
  std::vector<std::string> a = {"--timeout-s", "nan"};
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cli::TakeNumber(&a, "serve", "--timeout-s", 1, 10, &x));
  (void)::testing::internal::GetCapturedStderr();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunServe({"--max-tenants", "300"}), 2);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("[1, 256]"), std::string::npos);
  // The other commands' numbers too (sample took "two" as 0 examples, "hot" as greedy).
  const struct {
    int (*run)(const std::vector<std::string>&);
    std::vector<std::string> args;
    const char* named;
  } kBad[] = {{cli::RunSample, {"--task", "arithmetic", "--n", "two"}, "--n: 'two'"},
              {cli::RunSample, {"--task", "arithmetic", "--temperature", "hot"}, "--temperature"},
              {cli::RunSample, {"--task", "arithmetic", "--temperature", "-5"}, "--temperature"},
              {cli::RunLogs, {"t", "--lines", "5x"}, "--lines: '5x'"},
              {cli::RunDemo, {"--timeout-s", "soon"}, "--timeout-s: 'soon'"}};
  for (const auto& b : kBad) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(b.run(b.args), 2) << b.named;
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(b.named), std::string::npos) << err;
  }
}

// An option given last without its value, an unknown option, or one given twice is named as
// such; it was taken for a tenant ("no tenant '--token'") or a file ("no file --lang").
TEST(CommandLineTest, AnOptionWithoutItsValueOrUnknownIsNamed) {
  const testing::ScopedTempDir tmp("cli-options");
  const struct {
    int (*run)(const std::vector<std::string>&);
    std::vector<std::string> args;
    const char* named;
  } kBad[] = {{cli::RunStatus, {"--state-dir", tmp.path(), "--token"}, "'--token'"},
              {cli::RunStatus, {"--bogus"}, "'--bogus'"},
              {cli::RunLogs, {"t", "--state-dir"}, "'--state-dir'"},
              {cli::RunSandboxRun, {"--lang"}, "'--lang'"},
              {cli::RunValidate, {"--strict"}, "'--strict'"},
              {cli::RunServe, {"--job", "--state-dir", tmp.path() + "/s"}, "'--job'"},
              {cli::RunReport, {"--state-dir", tmp.path(), "--out", "x", "--out", "y"}, "'--out'"},
              // submit takes no token (the service admits any job on its socket): not ignored.
              {cli::RunSubmit, {"j.json", "--token", "t", "--state-dir", tmp.path()}, "'--token'"}};
  for (const auto& b : kBad) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(b.run(b.args), 2) << b.named;
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(std::string(b.named) +
                       " is not an option of this command, is given twice, or lacks its value"),
              std::string::npos)
        << err;
  }
  EXPECT_FALSE(fs::exists(tmp.path() + "/s")) << "serve started";
  // An empty value is refused by name: an empty --token stood for the admin token.
  for (const auto& [args, named] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--state-dir", tmp.path(), "--token", ""}, "--token is empty"},
           {{"--state-dir", ""}, "--state-dir is empty"},
           {{"--state-dir=", "--json"}, "--state-dir is empty"},
           {{"--state-dir", tmp.path(), "--token="}, "--token is empty"}}) {
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(cli::RunStatus(args), 2) << named;
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("marlaas status: " + named), std::string::npos) << err;
  }
}

// Two --job files naming one tenant: refused before anything starts, both files named (the
// second was once dropped in silence).
TEST(CommandLineTest, ServeRefusesTwoJobFilesNamingOneTenant) {
  const testing::ScopedTempDir tmp("serve-dup");
  const std::string a = tmp.path() + "/a.json", b = tmp.path() + "/b.json";
  ASSERT_TRUE(WriteFileAtomically(a, R"({"tenant": "dup", "task": "arithmetic"})").ok());
  ASSERT_TRUE(WriteFileAtomically(b, R"({"tenant": "dup", "task": "countdown"})").ok());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunServe({"--job", a, "--job", b, "--state-dir", tmp.path() + "/state"}), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(a + " and " + b + " both name tenant 'dup'"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(tmp.path() + "/state")) << "serve started";
}

// A job naming an unfinished tenant of the state dir resumes it; one that says otherwise than
// the tenant's job.json (edited since) is refused before anything starts, not ignored.
TEST(CommandLineTest, ServeRefusesAnEditedJobForAnUnfinishedTenant) {
  const testing::ScopedTempDir tmp("serve-edit");
  const std::string state = tmp.path() + "/state", job = tmp.path() + "/ch.json";
  fs::create_directories(state + "/tenants/ch");
  ASSERT_TRUE(WriteFileAtomically(state + "/tenants/ch/job.json",
                                  R"({"tenant": "ch", "task": "arithmetic", "max_steps": 100})")
                  .ok());
  ASSERT_TRUE(
      WriteFileAtomically(job, R"({"tenant": "ch", "task": "countdown", "max_steps": 20})").ok());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunServe({"--job", job, "--state-dir", state}), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(
      err.find(job + " names tenant 'ch', which " + state + " holds unfinished with another job"),
      std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(state + "/service.lock")) << "serve started";
}

// A base model the stages could not load and a device they could not use are refused before
// anything starts, naming the problem (the stages used to start, fail and be restarted until
// serve gave up, 10 to 23 s later).
TEST(CommandLineTest, ServeRefusesAMissingModelOrAnUnusableDeviceBeforeStarting) {
  const testing::ScopedTempDir tmp("serve-model");
  const std::string state = tmp.path() + "/state", model = tmp.path() + "/model";
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunServe({"--state-dir", state, "--model-dir", model}), 2);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("marlaas serve: the base model: "), std::string::npos) << err;
  EXPECT_NE(err.find(model + "/config.json"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(state + "/service.lock")) << "serve started";
  // A folder with a config.json but no weights.
  fs::create_directories(model);
  fs::copy_file(std::string(MARLAAS_SOURCE_DIR) + "/tests/data/llama/config.json",
                model + "/config.json");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunServe({"--state-dir", state, "--model-dir", model}), 2);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(model + " has neither model.safetensors nor model.safetensors.index.json"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(state + "/service.lock")) << "serve started";
  // "cuda" where this LibTorch has no CUDA (with one, the model above is what is refused).
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunServe({"--state-dir", state, "--model-dir", model, "--device", "cuda"}), 2);
  err = ::testing::internal::GetCapturedStderr();
  if (!cli::CheckDevice("cuda").ok()) {
    EXPECT_NE(err.find("marlaas serve: --device: device 'cuda': this LibTorch cannot run on CUDA"),
              std::string::npos)
        << err;
  }
  EXPECT_FALSE(fs::exists(state + "/service.lock")) << "serve started";
  // A model stage with a GPU list of its own sees other GPUs than serve: left to the stage. A
  // name that is no device at all is refused whatever the lists.
  ASSERT_EQ(::setenv("MARLAAS_TRAINER_GPUS", "1", 1), 0);
  EXPECT_TRUE(cli::CheckDevice("cuda:0").ok());
  const Status typo = cli::CheckDevice("cdua");
  EXPECT_EQ(typo.message().rfind("--device: ", 0), 0u) << typo.message();
  // A malformed list is named by its variable, not as the --device flag.
  ASSERT_EQ(::setenv("MARLAAS_TRAINER_GPUS", "1,x", 1), 0);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunServe({"--state-dir", state, "--model-dir", model, "--device", "cuda"}), 2);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("marlaas serve: MARLAAS_TRAINER_GPUS='1,x': 'x' is not a GPU index or UUID"),
            std::string::npos)
      << err;
  ASSERT_EQ(::unsetenv("MARLAAS_TRAINER_GPUS"), 0);
  EXPECT_TRUE(cli::CheckDevice("cpu").ok());
}

// `report` on a state dir whose files were damaged by hand: mistyped fields are left out of the
// plots and the first such line is named; nothing aborts (a string step, a null reward, a number
// where an object belongs, and a numeric task once killed it with an uncaught exception).
TEST(ReportTest, MistypedFieldsInTheStateDirAreLeftOutAndNamed) {
  const testing::ScopedTempDir tmp("report");
  const std::string dir = tmp.path() + "/tenants/a", out = tmp.path() + "/out";
  fs::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomically(dir + "/job.json", R"({"task": 5})").ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/steps.jsonl",
                                  "{\"step\": 1, \"reward_mean\": 0.25}\n"
                                  "{\"step\": \"x\", \"reward_mean\": 1}\n"
                                  "{\"step\": 2, \"reward_mean\": null}\n"
                                  "{\"step\": 3, \"reward_mean\": 0.5}\n")
                  .ok());
  ASSERT_TRUE(WriteFileAtomically(tmp.path() + "/metrics.jsonl",
                                  "{\"unix_ms\": 1000}\n"
                                  "{\"unix_ms\": 3000, \"utilization_now\": 5}\n"
                                  "{\"unix_ms\": \"soon\"}\n"
                                  "{\"unix_ms\": 5000, \"utilization_now\": {\"rollout\": 0.5, "
                                  "\"trainer\": 0.25, \"verifier\": 0.1}}\n")
                  .ok());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunReport({"--state-dir", tmp.path(), "--out", out}), 0);
  (void)::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("left out 4 damaged line(s)"), std::string::npos) << err;
  EXPECT_NE(err.find(dir + "/steps.jsonl:2 (step)"), std::string::npos) << err;
  auto table = ReadFile(out + "/table.txt");
  ASSERT_TRUE(table.ok());
  // Tenant a, task unknown, 2 plotted steps from 0.25 to 0.5.
  EXPECT_NE(table->find("a                        ?"), std::string::npos) << *table;
  EXPECT_NE(table->find("     2    0.250    0.500"), std::string::npos) << *table;
  auto svg = ReadFile(out + "/utilization.svg");
  ASSERT_TRUE(svg.ok());
  // Again into the same folder: its own files are replaced. Into a folder of other files (even
  // one named like a report's): refused, and nothing there is touched.
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunReport({"--state-dir", tmp.path(), "--out", out}), 0);
  (void)::testing::internal::GetCapturedStdout();
  (void)::testing::internal::GetCapturedStderr();
  const std::string project = tmp.path() + "/project";
  fs::create_directories(project);
  ASSERT_TRUE(WriteFileAtomically(project + "/table.txt", "mine").ok());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunReport({"--state-dir", tmp.path(), "--out", project}), 1);
  const std::string refused = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(refused.find("--out " + project + " holds files that are not an earlier report's"),
            std::string::npos)
      << refused;
  EXPECT_EQ(*ReadFile(project + "/table.txt"), "mine");
  EXPECT_FALSE(fs::exists(project + "/rewards.svg"));
}

// A bench's lists and its output file are checked before the first run (an hour of runs is not
// lost to a typo): "8," or an empty --modes is refused, as is --json into a missing folder; a
// sim file with a mistyped core count is named.
TEST(CliNumbersTest, BenchListsAndOutputAreCheckedBeforeAnyRun) {
  std::vector<std::string> items;
  EXPECT_TRUE(cli::SplitList("1,8,32", &items));
  EXPECT_EQ(items, (std::vector<std::string>{"1", "8", "32"}));
  for (const char* bad : {"", "8,", ",8", "1,,8", ","})
    EXPECT_FALSE(cli::SplitList(bad, &items)) << bad;
  const struct {
    std::vector<std::string> args;
    int rc;
    const char* named;
  } kBad[] = {
      {{"pipeline", "--tenants", "8,"}, 2, "--tenants"},
      {{"pipeline", "--modes", ""}, 2, "--modes"},
      {{"pipeline", "--tenants", "1", "--json", "/nonexistent-marlaas/p.json"}, 2, "no folder"},
      {{"pipeline", "--tenants", "1", "--json", "/tmp"}, 2, "/tmp is a folder"},
      {{"sim", "--calibrate", "p.json", "--tenants", "8,"}, 2, "--tenants"},
      {{"sim", "--calibrate", "p.json", "--modes", "async,"}, 2, "--modes"},
      {{"sim", "--calibrate", "p.json,"}, 2, "--calibrate"}};
  for (const auto& b : kBad) {
    ::testing::internal::CaptureStderr();
    ::testing::internal::CaptureStdout();
    EXPECT_EQ(cli::RunBench(b.args), b.rc) << b.named;
    (void)::testing::internal::GetCapturedStdout();
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find(b.named), std::string::npos) << err;
  }
  // The demo's --summary too: checked before its minutes of training.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunDemo({"--summary", "/nonexistent-marlaas/s.json"}), 2);
  const std::string demo_err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(demo_err.find("--summary /nonexistent-marlaas/s.json: no folder"), std::string::npos)
      << demo_err;
  // Not inside the state dir, even where it exists: a summary over the cached base's config.json
  // broke every later demo on it.
  const testing::ScopedTempDir demo_state("demo-state");
  ASSERT_TRUE(fs::create_directories(demo_state.path() + "/models/tiny"));
  ASSERT_TRUE(WriteFileAtomically(demo_state.path() + "/models/tiny/config.json", "{}").ok());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunDemo({"--state-dir", demo_state.path(), "--summary",
                          demo_state.path() + "/models/../models/tiny/config.json"}),
            2);
  const std::string inside_err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(inside_err.find("is inside the state dir " + demo_state.path()), std::string::npos)
      << inside_err;
  EXPECT_EQ(*ReadFile(demo_state.path() + "/models/tiny/config.json"), "{}");
  EXPECT_FALSE(fs::exists(demo_state.path() + "/runs"));  // refused before anything started
  const testing::ScopedTempDir tmp("bench-sim");
  const std::string file = tmp.path() + "/cores.json";
  ASSERT_TRUE(WriteFileAtomically(file, R"({"cores": "two", "measured": [{}]})").ok());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::RunBench({"sim", "--calibrate", file}), 1);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cores must be a whole number"), std::string::npos) << err;
  // --validate runs from a machine with other cores than the calibration's: both files named.
  sim::MeasuredRun m;
  m.mode = "async";
  m.tenants = 1;
  m.seed = 1;
  m.complete = true;
  m.wall_s = 1;
  m.tasks = {"arithmetic"};
  m.steps = m.group_size = m.prompts_per_step = m.checkpoint_every = m.verifier_workers = 1;
  const std::string cal = tmp.path() + "/cal.json", val = tmp.path() + "/val.json";
  for (const auto& [path, cores] : {std::pair<std::string, int>{cal, 2}, {val, 4}}) {
    const nlohmann::json doc = {{"cores", cores}, {"measured", {sim::MeasuredRunToJson(m)}}};
    ASSERT_TRUE(WriteFileAtomically(path, doc.dump()).ok());
  }
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli::RunBench({"sim", "--calibrate", cal, "--validate", val}), 1);
  (void)::testing::internal::GetCapturedStdout();
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find(val + " was measured on 4 cores, " + cal + " on 2"), std::string::npos) << err;
}

}  // namespace
}  // namespace marlaas::serve

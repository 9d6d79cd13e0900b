// bench_ring: the shared-memory Ring against Boost.Interprocess message_queue, a Unix socketpair
// and a pipe, with single-core memcpy as the physical limit. Producer and consumer are separate
// processes pinned to different cores. Throughput: the producer sends N messages and stops the
// clock when the consumer reports it received them all. Latency: ping-pong, one-way = RTT / 2.
//
//   bench_ring [--json FILE] [--quick]
//
// Poll: a consumer's Fetch with a deadline already passed on an empty ring, the stage loops'
// non-blocking check (their producers attached and alive): it must answer without waiting.
//
// --quick runs a tenth of the messages (a smoke test: targets are printed, not enforced).
// Exit status: 0, or 1 when a target is missed in a full run.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/transports.h"
#include "shm/ring_consumer.h"
#include "shm/ring_producer.h"

namespace marlaas::bench {
namespace {

struct Row {
  std::string transport;
  size_t size = 0;
  double msgs_per_s = 0, gb_per_s = 0;
  double p50_us = -1, p99_us = -1;  // -1: not measured
};

const std::vector<std::string> kTransports = {"ring", "boost_mq", "socketpair", "pipe"};
const std::vector<size_t> kSizes = {64, 4096, 65536, 1 << 20};

size_t ThroughputCount(size_t size, bool quick) {
  size_t n = size <= 64 ? 2000000 : size <= 4096 ? 300000 : size <= 65536 ? 30000 : 2000;
  return quick ? n / 10 : n;
}
size_t LatencyIters(size_t size, bool quick) {
  size_t n = size <= 4096 ? 20000 : size <= 65536 ? 5000 : 500;
  return quick ? n / 10 : n;
}

std::vector<unsigned char> RandomBytes(size_t n) {
  std::vector<unsigned char> v(n);
  std::mt19937_64 rng(n);
  for (auto& b : v) b = (unsigned char)rng();
  return v;
}

std::string Instance() { return "bench" + std::to_string(getpid()); }

// Runs `child` in a forked process pinned to CPU 1 and returns its pid.
template <typename F>
pid_t Spawn(F child) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    PinToCpu(1);
    _exit(child() ? 0 : 1);
  }
  return pid;
}

// Nanoseconds per Fetch(Deadline::Now()) on an empty ring whose producer is attached, or -1.
double PollNs(size_t polls) {
  const SegmentName name{Instance(), "poll"};
  if (!CreateRing(name, RingOptions{1 << 16, 1024}).ok()) return -1;
  auto producer = RingProducer::Attach(name);
  auto consumer = RingConsumer::Attach(name);
  double ns = -1;
  if (producer.ok() && consumer.ok()) {
    const double t0 = NowSeconds();
    size_t timeouts = 0;
    for (size_t i = 0; i < polls; ++i) {
      auto r = consumer->Fetch(Deadline::Now());
      timeouts += !r.ok() && r.status().code() == StatusCode::kTimeout;
    }
    if (timeouts == polls) ns = (NowSeconds() - t0) / double(polls) * 1e9;
  }
  (void)Segment::Remove(name);
  return ns;
}

bool ChildOk(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool Throughput(const std::string& kind, size_t size, size_t count, Row* row) {
  auto t = MakeTransport(kind, size, Instance());
  if (!t || !t->Prepare()) return false;
  pid_t pid = Spawn([&] {
    if (!t->Open(Side::kChild)) return false;
    std::vector<unsigned char> scratch(size);
    for (size_t i = 0; i < count; ++i) {
      if (t->Recv(scratch.data(), size) == nullptr) return false;
      t->Done();
    }
    const unsigned char done = 1;
    return t->Send(&done, 1);
  });
  PinToCpu(0);
  bool ok = t->Open(Side::kParent);
  const std::vector<unsigned char> data = RandomBytes(size);
  unsigned char ack[1];
  const double t0 = NowSeconds();
  for (size_t i = 0; ok && i < count; ++i) ok = t->Send(data.data(), size);
  ok = ok && t->Recv(ack, 1) != nullptr;
  const double dt = NowSeconds() - t0;
  if (ok) t->Done();
  ok = ChildOk(pid) && ok;
  t->Cleanup();
  row->msgs_per_s = double(count) / dt;
  row->gb_per_s = double(count) * double(size) / dt / 1e9;
  return ok;
}

bool Latency(const std::string& kind, size_t size, size_t iters, Row* row) {
  auto t = MakeTransport(kind, size, Instance());
  if (!t || !t->Prepare()) return false;
  const size_t warmup = iters / 10 + 1;
  pid_t pid = Spawn([&] {
    if (!t->Open(Side::kChild)) return false;
    std::vector<unsigned char> scratch(size);
    const std::vector<unsigned char> reply = RandomBytes(size);
    for (size_t i = 0; i < warmup + iters; ++i) {
      if (t->Recv(scratch.data(), size) == nullptr) return false;
      t->Done();
      if (!t->Send(reply.data(), size)) return false;
    }
    return true;
  });
  PinToCpu(0);
  bool ok = t->Open(Side::kParent);
  const std::vector<unsigned char> data = RandomBytes(size);
  std::vector<unsigned char> scratch(size);
  std::vector<double> one_way_us;
  for (size_t i = 0; ok && i < warmup + iters; ++i) {
    const double t0 = NowSeconds();
    ok = t->Send(data.data(), size) && t->Recv(scratch.data(), size) != nullptr;
    const double rtt = NowSeconds() - t0;
    if (ok) t->Done();
    if (i >= warmup) one_way_us.push_back(rtt / 2 * 1e6);
  }
  ok = ChildOk(pid) && ok;
  t->Cleanup();
  row->p50_us = Percentile(one_way_us, 50);
  row->p99_us = Percentile(one_way_us, 99);
  return ok;
}

Row Memcpy(size_t size, size_t count) {
  PinToCpu(0);
  std::vector<unsigned char> src = RandomBytes(size), dst(size);
  // Warm both buffers, then copy `count` times; the asm barrier keeps every copy.
  std::memcpy(dst.data(), src.data(), size);
  const double t0 = NowSeconds();
  for (size_t i = 0; i < count; ++i) {
    std::memcpy(dst.data(), src.data(), size);
    asm volatile("" : : "r"(dst.data()) : "memory");
  }
  const double dt = NowSeconds() - t0;
  Row r;
  r.transport = "memcpy";
  r.size = size;
  r.msgs_per_s = double(count) / dt;
  r.gb_per_s = double(count) * double(size) / dt / 1e9;
  return r;
}

const Row* Find(const std::vector<Row>& rows, const std::string& t, size_t size) {
  for (const Row& r : rows)
    if (r.transport == t && r.size == size) return &r;
  return nullptr;
}

std::string SizeName(size_t s) {
  if (s >= (1 << 20)) return std::to_string(s >> 20) + " MiB";
  if (s >= 1024) return std::to_string(s >> 10) + " KiB";
  return std::to_string(s) + " B";
}

int Run(int argc, char** argv) {
  BenchArgs args;
  if (!ParseBenchArgs(argc, argv, "bench_ring [--json FILE] [--quick]", &args)) return 2;
  const bool quick = args.quick;
  std::vector<Row> rows;
  for (size_t size : kSizes) {
    for (const std::string& kind : kTransports) {
      Row r;
      r.transport = kind;
      r.size = size;
      if (!Throughput(kind, size, ThroughputCount(size, quick), &r) ||
          !Latency(kind, size, LatencyIters(size, quick), &r)) {
        std::fprintf(stderr, "bench_ring: %s at %zu bytes failed\n", kind.c_str(), size);
        return 1;
      }
      rows.push_back(r);
      std::fprintf(stderr, "  %-10s %8s done\n", kind.c_str(), SizeName(size).c_str());
    }
    rows.push_back(Memcpy(size, ThroughputCount(size, quick)));
  }

  std::printf("\n%-8s %-11s %13s %9s %9s %9s %10s %10s\n", "size", "transport", "msgs/s", "GB/s",
              "p50 us", "p99 us", "ring/this", "this/mcpy");
  for (size_t size : kSizes) {
    const Row* ring = Find(rows, "ring", size);
    const Row* mem = Find(rows, "memcpy", size);
    for (const Row& r : rows) {
      if (r.size != size) continue;
      char p50[16] = "-", p99[16] = "-";
      if (r.p50_us >= 0) std::snprintf(p50, sizeof(p50), "%.1f", r.p50_us);
      if (r.p99_us >= 0) std::snprintf(p99, sizeof(p99), "%.1f", r.p99_us);
      std::printf("%-8s %-11s %13.0f %9.2f %9s %9s %9.2fx %9.2fx\n", SizeName(size).c_str(),
                  r.transport.c_str(), r.msgs_per_s, r.gb_per_s, p50, p99,
                  ring->gb_per_s / r.gb_per_s, r.gb_per_s / mem->gb_per_s);
    }
  }

  const double poll_ns = PollNs(quick ? 20000 : 200000);
  std::printf("\nempty-ring poll (Fetch with an expired deadline): %.0f ns\n", poll_ns);
  if (poll_ns < 0) {
    std::fprintf(stderr, "bench_ring: the poll of an empty ring did not time out\n");
    return 1;
  }

  const Row* ring1m = Find(rows, "ring", 1 << 20);
  const Row* ring64 = Find(rows, "ring", 64);
  const Row* ring4k = Find(rows, "ring", 4096);
  std::vector<Target> targets = {
      {"ring 1 MiB GB/s / memcpy 1 MiB GB/s",
       ring1m->gb_per_s / Find(rows, "memcpy", 1 << 20)->gb_per_s, 0.5, true},
      {"ring 1 MiB GB/s / socketpair 1 MiB GB/s",
       ring1m->gb_per_s / Find(rows, "socketpair", 1 << 20)->gb_per_s, 3.0, true},
      {"ring 64 B records/s (millions), blocking waits on", ring64->msgs_per_s / 1e6, 5.0, true},
      {"ring ping-pong 64 B one-way p99 (us)", ring64->p99_us, 20.0, false},
      {"ring ping-pong 4 KiB one-way p99 (us)", ring4k->p99_us, 20.0, false},
      {"empty-ring poll (us)", poll_ns / 1e3, 1.0, false},
  };
  std::vector<std::string> objects;
  for (const Row& r : rows) {
    objects.push_back(
        "{\"transport\":\"" + r.transport + "\",\"size\":" + std::to_string(r.size) +
        ",\"msgs_per_s\":" + JsonNumber(r.msgs_per_s) + ",\"gb_per_s\":" + JsonNumber(r.gb_per_s) +
        ",\"p50_us\":" + JsonNumber(r.p50_us) + ",\"p99_us\":" + JsonNumber(r.p99_us) + "}");
  }
  return FinishBench(args, objects, targets);
}

}  // namespace
}  // namespace marlaas::bench

int main(int argc, char** argv) { return marlaas::bench::Run(argc, argv); }

// Ring behaviour across real processes: ordering, integrity, wrap-around, blocking waits that end
// when the peer dies, and what survives a kill -9 of either end.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shm/ring_consumer.h"
#include "shm/ring_producer.h"
#include "tests/test_util.h"

namespace marlaas {
namespace {

using testing::CheckPattern;
using testing::FillPattern;
using testing::ForkChild;
using testing::KillChild;
using testing::ScopedInstance;
using testing::WaitChild;

constexpr uint32_t kData = 1;
constexpr uint32_t kEnd = 2;

// Payload size of record `seq` in [1, max].
uint32_t SizeOf(uint64_t seq, uint32_t max) {
  uint64_t s = seq ^ 0xabcdef;
  return uint32_t(1 + testing::SplitMix64(&s) % max);
}

// Pushes records seq = next_seq() .. n-1 with pattern content, then an end record.
int ProduceUntil(const SegmentName& name, uint64_t n, uint32_t max) {
  auto p = RingProducer::Attach(name);
  if (!p.ok()) return 10;
  std::vector<unsigned char> buf(max);
  for (uint64_t seq = p->next_seq(); seq < n; seq = p->next_seq()) {
    const uint32_t len = SizeOf(seq, max);
    FillPattern(seq, buf.data(), len);
    Status st = p->Push(kData, buf.data(), len, Deadline::AfterMs(30000));
    if (st.code() == StatusCode::kPeerDead) {  // consumer restarting: try again shortly
      usleep(1000);
      continue;
    }
    if (!st.ok()) return 11;
  }
  if (p->next_seq() == n) {
    if (!p->Push(kEnd, "end", 3, Deadline::AfterMs(30000)).ok()) return 12;
  }
  return 0;
}

TEST(RingTest, PushFetchAckInOneProcess) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  ASSERT_TRUE(CreateRing(name, {4096, 512}).ok());
  auto p = RingProducer::Attach(name);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto c = RingConsumer::Attach(name);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(p->Push(7, "hello", 5, Deadline::AfterMs(100)).ok());
  ASSERT_TRUE(p->Push(8, "", 0, Deadline::AfterMs(100)).ok());
  auto r = c->Fetch(Deadline::AfterMs(100));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->type, 7u);
  EXPECT_EQ(r->seq, 0u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->data), r->size), "hello");
  auto r2 = c->Fetch(Deadline::AfterMs(100));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->type, 8u);
  EXPECT_EQ(r2->seq, 1u);
  EXPECT_EQ(r2->size, 0u);
  c->Ack(*r2);
  EXPECT_EQ(c->unacked_bytes(), 0u);
  auto none = c->Fetch(Deadline::AfterMs(20));
  EXPECT_EQ(none.status().code(), StatusCode::kTimeout);
}

TEST(RingTest, RecordLargerThanMaximumIsRefusedNotTruncated) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  ASSERT_TRUE(CreateRing(name, {4096, 512}).ok());
  auto p = RingProducer::Attach(name);
  ASSERT_TRUE(p.ok());
  std::vector<char> big(513, 'x');
  Status st = p->Push(kData, big.data(), big.size(), Deadline::AfterMs(100));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("513 bytes exceeds the maximum of 512"), std::string::npos)
      << st.message();
  EXPECT_EQ(p->next_seq(), 0u);  // nothing committed
  EXPECT_TRUE(p->Push(kData, big.data(), 512, Deadline::AfterMs(100)).ok());
}

TEST(RingTest, OptionsThatCannotHoldTwoMaximalRecordsAreRejected) {
  EXPECT_FALSE((RingOptions{4096, 4000}).Validate().ok());
  EXPECT_FALSE((RingOptions{5000, 100}).Validate().ok());  // not a power of two
  EXPECT_TRUE((RingOptions{8192, 4000}).Validate().ok());
}

TEST(RingTest, UncommittedReservationIsInvisibleAndCommittedOneIsZeroCopy) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  ASSERT_TRUE(CreateRing(name, {4096, 256}).ok());
  auto p = RingProducer::Attach(name);
  auto c = RingConsumer::Attach(name);
  ASSERT_TRUE(p.ok() && c.ok());
  auto span = p->Reserve(100, Deadline::AfterMs(100));
  ASSERT_TRUE(span.ok());
  std::memset(*span, 'a', 100);
  EXPECT_EQ(c->Fetch(Deadline::AfterMs(10)).status().code(), StatusCode::kTimeout);
  span = p->Reserve(4, Deadline::AfterMs(100));  // drops the first reservation
  ASSERT_TRUE(span.ok());
  std::memcpy(*span, "abcd", 4);
  ASSERT_TRUE(p->Commit(3).ok());
  auto r = c->Fetch(Deadline::AfterMs(100));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->seq, 0u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r->data), r->size), "abcd");
  // Zero-copy: the view is the ring memory the producer wrote (mapped twice in this process).
  (*span)[0] = 'z';
  EXPECT_EQ(r->data[0], 'z');
}

// Property: records of random sizes 1..max cross two processes in order, intact, while the ring
// wraps around thousands of times.
TEST(RingTest, RandomSizedRecordsAcrossProcessesWrapManyTimes) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  constexpr uint32_t kMax = 16 << 10;
  constexpr uint64_t kCapacity = 64 << 10;
  constexpr uint64_t kRecords = 20000;
  ASSERT_TRUE(CreateRing(name, {kCapacity, kMax}).ok());
  auto c = RingConsumer::Attach(name);
  ASSERT_TRUE(c.ok());
  pid_t producer = ForkChild([&] { return ProduceUntil(name, kRecords, kMax); });
  uint64_t bytes = 0;
  for (uint64_t seq = 0; seq < kRecords; ++seq) {
    auto r = c->Fetch(Deadline::AfterMs(20000));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->seq, seq);
    ASSERT_EQ(r->type, kData);
    ASSERT_EQ(r->size, SizeOf(seq, kMax));
    ASSERT_TRUE(CheckPattern(seq, r->data, r->size)) << "content of record " << seq;
    bytes += RecordBytes(r->size);
    c->Ack(*r);
  }
  auto end = c->Fetch(Deadline::AfterMs(20000));
  ASSERT_TRUE(end.ok());
  EXPECT_EQ(end->type, kEnd);
  EXPECT_GT(bytes / kCapacity, 1000u) << "the ring should have wrapped many times";
  auto exit = WaitChild(producer);
  EXPECT_TRUE(exit.exited && exit.code == 0) << exit.code;
}

// Property: kill -9 of the producer at random points, mid-record included, loses no committed
// record and corrupts none: the consumer sees seq 0..N-1 contiguous with correct content.
TEST(RingTest, ProducerKilledAtRandomPointsLosesNothingCommitted) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  constexpr uint32_t kMax = 4096;
  constexpr uint64_t kRecords = 30000;
  ASSERT_TRUE(CreateRing(name, {32 << 10, kMax}).ok());
  pid_t consumer = ForkChild([&]() -> int {
    auto c = RingConsumer::Attach(name);
    if (!c.ok()) return 20;
    for (uint64_t seq = 0;; ++seq) {
      Result<RecordView> r = c->Fetch(Deadline::AfterMs(30000));
      while (!r.ok() && r.status().code() == StatusCode::kPeerDead) {
        usleep(500);  // producer being restarted
        r = c->Fetch(Deadline::AfterMs(30000));
      }
      if (!r.ok()) {
        std::fprintf(stderr, "consumer: %s\n", r.status().ToString().c_str());
        return 21;
      }
      if (r->type == kEnd) return seq == kRecords ? 0 : 22;
      if (r->seq != seq || r->size != SizeOf(seq, kMax) || !CheckPattern(seq, r->data, r->size)) {
        std::fprintf(stderr, "consumer: bad record seq %llu (expected %llu)\n",
                     (unsigned long long)r->seq, (unsigned long long)seq);
        return 23;
      }
      c->Ack(*r);
    }
  });
  std::mt19937 rng(12345);
  int self_kills = 0, external_kills = 0;
  for (int round = 0; round < 24; ++round) {
    if (round % 3 == 2) {
      // Dies in the middle of writing a record: reserved and half-filled, never committed.
      const int records_first = int(rng() % 200);
      pid_t p = ForkChild([&]() -> int {
        auto prod = RingProducer::Attach(name);
        if (!prod.ok()) return 30;
        std::vector<unsigned char> buf(kMax);
        for (int i = 0; i < records_first && prod->next_seq() < kRecords; ++i) {
          const uint64_t seq = prod->next_seq();
          FillPattern(seq, buf.data(), SizeOf(seq, kMax));
          if (!prod->Push(kData, buf.data(), SizeOf(seq, kMax), Deadline::AfterMs(30000)).ok())
            return 31;
        }
        auto span = prod->Reserve(kMax, Deadline::AfterMs(30000));
        if (!span.ok()) return 32;
        std::memset(*span, 0xee, kMax / 2);
        ::raise(SIGKILL);
        return 33;
      });
      auto e = WaitChild(p);
      EXPECT_EQ(e.signal, SIGKILL) << "mid-record producer exited with " << e.code;
      ++self_kills;
    } else {
      pid_t p = ForkChild([&] { return ProduceUntil(name, kRecords, kMax); });
      std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 3000));
      auto e = KillChild(p);
      if (e.signal == SIGKILL) ++external_kills;
    }
  }
  pid_t last = ForkChild([&] { return ProduceUntil(name, kRecords, kMax); });
  auto e = WaitChild(last);
  EXPECT_TRUE(e.exited && e.code == 0) << "final producer: " << e.code;
  auto ce = WaitChild(consumer);
  EXPECT_TRUE(ce.exited && ce.code == 0) << "consumer exit code " << ce.code;
  EXPECT_EQ(self_kills, 8);
  EXPECT_GT(external_kills, 4);
}

// Log entry written by a consumer incarnation before it acks: (seq, ring end position).
struct LogEntry {
  uint64_t seq;
  uint64_t end;
};
constexpr uint64_t kIncarnationMark = ~uint64_t(0);

// Property: kill -9 of the consumer between fetch and ack re-delivers exactly the records whose
// output was committed (logged) but not acked, and nothing that was acked.
TEST(RingTest, ConsumerKilledBeforeAckRedeliversExactlyTheUnackedRecords) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  constexpr uint32_t kMax = 1024;
  constexpr uint64_t kRecords = 100000;  // enough that every incarnation dies before the end
  ASSERT_TRUE(CreateRing(name, {16 << 10, kMax}).ok());
  char log_path[] = "/tmp/marlaas_ring_logXXXXXX";
  int log_fd = ::mkstemp(log_path);
  ASSERT_GE(log_fd, 0);
  ::close(log_fd);
  pid_t producer = ForkChild([&] { return ProduceUntil(name, kRecords, kMax); });

  // One consumer incarnation: logs each record (the "downstream commit"), then acks it. With
  // die_after > 0 it kills itself after logging that many records, before acking the last.
  // The parent returns from run_consumer once the incarnation has attached and logged its mark
  // (or has died before: the parent holds no write end of its pipe, so the read sees the end).
  auto run_consumer = [&](uint64_t incarnation, int die_after) {
    int ready[2];
    EXPECT_EQ(::pipe(ready), 0);
    pid_t pid = ForkChild([&, incarnation, die_after]() -> int {
      int fd = ::open(log_path, O_WRONLY | O_APPEND);
      if (fd < 0) return 40;
      auto c = RingConsumer::Attach(name);
      if (!c.ok()) return 41;
      LogEntry mark{kIncarnationMark, incarnation};
      if (::write(fd, &mark, sizeof(mark)) != sizeof(mark)) return 42;
      if (::write(ready[1], "r", 1) != 1) return 46;
      for (int n = 1;; ++n) {
        auto r = c->Fetch(Deadline::AfterMs(30000));
        if (!r.ok()) {
          std::fprintf(stderr, "consumer %d: %s\n", int(incarnation),
                       r.status().ToString().c_str());
          return 43;
        }
        if (r->type == kEnd) return 0;
        if (!CheckPattern(r->seq, r->data, r->size)) return 44;
        LogEntry e{r->seq, r->end};
        if (::write(fd, &e, sizeof(e)) != sizeof(e)) return 45;
        if (n == die_after) ::raise(SIGKILL);
        c->Ack(*r);
      }
    });
    ::close(ready[1]);
    char x;
    EXPECT_EQ(::read(ready[0], &x, 1), 1) << "consumer " << incarnation << " died before its mark";
    ::close(ready[0]);
    return pid;
  };

  // The ring's ack cursor, read after each incarnation died.
  auto ack_cursor = [&]() -> uint64_t {
    auto seg = Segment::Attach(name, SegmentKind::kRing, kRingLayoutVersion);
    if (!seg.ok()) {
      ADD_FAILURE() << seg.status().ToString();
      return 0;
    }
    return static_cast<RingControl*>(seg->payload())->ack.load();
  };
  std::vector<uint64_t> ack_at_death;
  std::mt19937 rng(777);
  const int kIncarnations = 16;
  for (int i = 0; i < kIncarnations; ++i) {
    if (i % 2 == 0) {
      auto e = WaitChild(run_consumer(i, 1 + int(rng() % 500)));
      EXPECT_EQ(e.signal, SIGKILL) << "consumer exited with code " << e.code;
    } else {
      pid_t c = run_consumer(i, 0);
      std::this_thread::sleep_for(std::chrono::microseconds(200 + rng() % 2000));
      EXPECT_EQ(KillChild(c).signal, SIGKILL) << "consumer reached the end before its kill";
    }
    ack_at_death.push_back(ack_cursor());
  }
  auto last = WaitChild(run_consumer(kIncarnations, 0));
  EXPECT_TRUE(last.exited && last.code == 0) << last.code;
  auto pe = WaitChild(producer);
  EXPECT_TRUE(pe.exited && pe.code == 0) << pe.code;

  // Split the log into incarnations.
  std::vector<std::vector<LogEntry>> runs;
  int fd = ::open(log_path, O_RDONLY);
  LogEntry e;
  while (::read(fd, &e, sizeof(e)) == sizeof(e)) {
    if (e.seq == kIncarnationMark) {
      runs.emplace_back();
    } else {
      ASSERT_FALSE(runs.empty());
      runs.back().push_back(e);
    }
  }
  ::close(fd);
  ::unlink(log_path);
  ASSERT_EQ(runs.size(), size_t(kIncarnations + 1));

  // Where each seq was logged (incarnation indices, in order).
  std::vector<std::vector<size_t>> seen(kRecords);
  for (size_t i = 0; i < runs.size(); ++i) {
    for (size_t k = 0; k < runs[i].size(); ++k) {
      if (k > 0) {
        ASSERT_EQ(runs[i][k].seq, runs[i][k - 1].seq + 1) << "gap in incarnation " << i;
      }
      ASSERT_LT(runs[i][k].seq, kRecords);
      seen[runs[i][k].seq].push_back(i);
    }
  }
  int redelivered = 0;
  for (size_t i = 0; i + 1 < runs.size(); ++i) {
    uint64_t acked = 0;  // records acked when incarnation i died: those ending at or before ack
    for (size_t j = 0; j <= i; ++j) {
      for (const auto& entry : runs[j]) {
        if (entry.end <= ack_at_death[i]) acked = std::max(acked, entry.seq + 1);
      }
    }
    // Replay starts exactly at the first unacked record.
    if (!runs[i + 1].empty()) {
      EXPECT_EQ(runs[i + 1].front().seq, acked) << "incarnation " << i + 1;
    }
    for (const auto& entry : runs[i]) {
      const auto& where = seen[entry.seq];
      const bool delivered_again = where.back() > i;
      // Acked records are never delivered again; logged-but-unacked ones always are.
      EXPECT_EQ(delivered_again, entry.seq >= acked) << "seq " << entry.seq << " run " << i;
      redelivered += delivered_again;
    }
  }
  for (uint64_t seq = 0; seq < kRecords; ++seq) ASSERT_FALSE(seen[seq].empty()) << "lost " << seq;
  EXPECT_GE(redelivered, kIncarnations / 2) << "each self-kill leaves one logged, unacked record";
}

// Forks a process that attaches to `name` as producer (or consumer) and then sleeps; returns
// once it has attached.
pid_t ForkIdlePeer(const SegmentName& name, bool producer) {
  int ready[2];
  if (::pipe(ready) != 0) return -1;
  pid_t pid = ForkChild([&]() -> int {
    // Both ends stay attached until the process dies.
    auto p = producer ? RingProducer::Attach(name) : Result<RingProducer>(Status());
    auto c = producer ? Result<RingConsumer>(Status()) : RingConsumer::Attach(name);
    (void)!::write(ready[1], (producer ? p.ok() : c.ok()) ? "1" : "0", 1);
    ::pause();
    return 0;
  });
  // Only the child holds the write end: one that dies before writing ends the read.
  ::close(ready[1]);
  char x = 0;
  if (::read(ready[0], &x, 1) != 1 || x != '1') {
    if (pid > 0) KillChild(pid);
    pid = -1;
  }
  ::close(ready[0]);
  return pid;
}

// Runs wait() while another thread kill -9s `peer` after 200 ms; returns wait()'s status and
// how long it took.
template <typename Wait>
std::pair<Status, std::chrono::steady_clock::duration> WaitWhilePeerIsKilled(pid_t peer,
                                                                             Wait wait) {
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::kill(peer, SIGKILL);
  });
  const auto t0 = std::chrono::steady_clock::now();
  Status st = wait();
  const auto waited = std::chrono::steady_clock::now() - t0;
  killer.join();
  WaitChild(peer);
  return {st, waited};
}

// Property: a consumer blocked on an empty ring returns kPeerDead, well before its timeout,
// when the producer dies.
TEST(RingTest, BlockedConsumerReturnsWhenProducerDies) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  ASSERT_TRUE(CreateRing(name, {4096, 256}).ok());
  const pid_t producer = ForkIdlePeer(name, /*producer=*/true);
  ASSERT_GT(producer, 0);
  auto c = RingConsumer::Attach(name);
  ASSERT_TRUE(c.ok());
  auto [st, waited] =
      WaitWhilePeerIsKilled(producer, [&] { return c->Fetch(Deadline::AfterMs(20000)).status(); });
  EXPECT_EQ(st.code(), StatusCode::kPeerDead) << st.ToString();
  EXPECT_NE(st.message().find("producer (pid " + std::to_string(producer) + ")"),
            std::string::npos);
  EXPECT_LT(waited, std::chrono::seconds(10));
}

// Property: a producer blocked on a full ring returns kPeerDead when the consumer dies.
TEST(RingTest, BlockedProducerReturnsWhenConsumerDies) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  ASSERT_TRUE(CreateRing(name, {4096, 256}).ok());
  const pid_t consumer = ForkIdlePeer(name, /*producer=*/false);
  ASSERT_GT(consumer, 0);
  auto p = RingProducer::Attach(name);
  ASSERT_TRUE(p.ok());
  char rec[200] = {};
  int pushed = 0;
  while (p->Push(kData, rec, sizeof(rec), Deadline::Now()).ok()) ++pushed;
  EXPECT_GT(pushed, 10);
  auto [st, waited] = WaitWhilePeerIsKilled(
      consumer, [&] { return p->Push(kData, rec, sizeof(rec), Deadline::AfterMs(20000)); });
  EXPECT_EQ(st.code(), StatusCode::kPeerDead) << st.ToString();
  EXPECT_LT(waited, std::chrono::seconds(10));
}

TEST(RingTest, WaitWithoutAnyProducerTimesOutAndSaysSo) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  ASSERT_TRUE(CreateRing(name, {4096, 256}).ok());
  auto c = RingConsumer::Attach(name);
  ASSERT_TRUE(c.ok());
  auto r = c->Fetch(Deadline::AfterMs(50));
  EXPECT_EQ(r.status().code(), StatusCode::kTimeout);
  EXPECT_NE(r.status().message().find("no producer attached"), std::string::npos)
      << r.status().message();
}

TEST(RingTest, SecondLiveProducerIsRefusedWithItsPid) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  ASSERT_TRUE(CreateRing(name, {4096, 256}).ok());
  auto p = RingProducer::Attach(name);
  ASSERT_TRUE(p.ok());
  pid_t child = ForkChild([&]() -> int {
    auto p2 = RingProducer::Attach(name);
    if (p2.ok()) return 1;
    const bool names_pid =
        p2.status().message().find("pid " + std::to_string(getppid())) != std::string::npos;
    return p2.status().code() == StatusCode::kAlreadyExists && names_pid ? 0 : 2;
  });
  auto e = WaitChild(child);
  EXPECT_TRUE(e.exited && e.code == 0) << e.code;
}

TEST(RingTest, CorruptRecordIsReportedQuarantinedAndTheNextOneDelivered) {
  ScopedInstance inst;
  const SegmentName name{inst.name(), "r"};
  ASSERT_TRUE(CreateRing(name, {4096, 256}).ok());
  auto p = RingProducer::Attach(name);
  auto c = RingConsumer::Attach(name);
  ASSERT_TRUE(p.ok() && c.ok());
  ASSERT_TRUE(p->Push(kData, "first", 5, Deadline::AfterMs(100)).ok());
  ASSERT_TRUE(p->Push(kData, "second", 6, Deadline::AfterMs(100)).ok());
  ASSERT_TRUE(p->Push(kData, "third", 5, Deadline::AfterMs(100)).ok());
  {  // flip one payload byte of the second record, as a stray write would
    auto seg = Segment::Attach(name, SegmentKind::kRing, kRingLayoutVersion);
    ASSERT_TRUE(seg.ok());
    auto* control = static_cast<RingControl*>(seg->payload());
    control->data()[RecordBytes(5) + sizeof(RecordHeader) + 2] ^= 0x40;
  }
  auto r1 = c->Fetch(Deadline::AfterMs(100));
  ASSERT_TRUE(r1.ok());
  auto bad = c->Fetch(Deadline::AfterMs(100));
  EXPECT_EQ(bad.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad.status().message().find("checksum mismatch in record seq 1"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(c->Fetch(Deadline::AfterMs(10)).status().code(), StatusCode::kFailedPrecondition);
  std::string raw;
  auto skipped = c->Quarantine(&raw);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, RecordBytes(6));
  EXPECT_EQ(raw.size(), RecordBytes(6));
  auto r3 = c->Fetch(Deadline::AfterMs(100));
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ(r3->seq, 2u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(r3->data), r3->size), "third");
}

}  // namespace
}  // namespace marlaas

// SeqlockCell in memory shared between processes: a reader never sees a torn value while another
// process stores, and a writer killed in the middle of a store makes readers fail at once (not
// spin to their deadline on every read) until the next store repairs the cell.
#include "shm/seqlock.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <new>
#include <thread>

#include "tests/test_util.h"

namespace marlaas {

// A store cut short, as a writer killed between its two sequence updates leaves it.
struct SeqlockCellTestPeer {
  template <typename T>
  static void BeginStore(SeqlockCell<T>* cell) {
    cell->writer_.store(int32_t(getpid()));
    cell->seq_.store(cell->seq_.load() | 1);
  }
};

namespace {

struct Wide {
  uint64_t v[32];  // 256 bytes: many words to tear
};

// Null if the mapping failed.
SeqlockCell<Wide>* SharedCell() {
  void* p = ::mmap(nullptr, sizeof(SeqlockCell<Wide>), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : new (p) SeqlockCell<Wide>();
}

// The writer stores 1, 2, 3, ... until the reader has seen many different values, so that the
// two really overlap.
TEST(SeqlockTest, AReaderNeverSeesATornValueWhileAnotherProcessStores) {
  SeqlockCell<Wide>* cell = SharedCell();
  ASSERT_NE(cell, nullptr);
  std::atomic<int>* stop = testing::MapShared<std::atomic<int>>();
  ASSERT_NE(stop, nullptr);
  const pid_t writer = testing::ForkChild([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    Wide w;
    for (uint64_t i = 1; stop->load() == 0; ++i) {
      for (uint64_t& x : w.v) x = i;
      cell->Store(w);
      if (i % 1024 == 0 && std::chrono::steady_clock::now() > give_up) return 1;
    }
    return 0;
  });
  ASSERT_GT(writer, 0);
  constexpr int kDistinct = 100;  // on one shared core, about one per time slice
  int loaded = 0, torn = 0, distinct = 0;
  uint64_t last = 0;
  bool backwards = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (distinct < kDistinct && std::chrono::steady_clock::now() < give_up) {
    Wide w;
    if (!cell->Load(&w)) continue;
    ++loaded;
    for (uint64_t x : w.v) torn += x != w.v[0];
    backwards = backwards || w.v[0] < last;
    distinct += w.v[0] != last;
    last = w.v[0];
  }
  stop->store(1);
  const testing::ChildExit e = testing::WaitChildFor(writer, 30);
  EXPECT_TRUE(e.exited && e.code == 0) << "writer exit " << e.code << " signal " << e.signal;
  EXPECT_GT(loaded, 0);
  EXPECT_GT(distinct, 1) << "the reader never saw the writer's stores";
  EXPECT_EQ(torn, 0);
  EXPECT_FALSE(backwards);
  Wide w;
  ASSERT_TRUE(cell->Load(&w));
  EXPECT_EQ(w.v[31], cell->stores());  // store i wrote i
  testing::UnmapShared(stop);
}

TEST(SeqlockTest, AWriterKilledMidStoreFailsReadersAtOnceUntilTheNextStore) {
  SeqlockCell<Wide>* cell = SharedCell();
  ASSERT_NE(cell, nullptr);
  Wide w{};
  w.v[0] = 7;
  cell->Store(w);
  const pid_t writer = ::fork();
  if (writer == 0) {
    SeqlockCellTestPeer::BeginStore(cell);
    ::_exit(0);  // dies with the sequence odd
  }
  ::waitpid(writer, nullptr, 0);
  Wide out{};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(cell->Load(&out, Deadline::AfterMs(20000)));
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 5.0) << "the reader waited for its deadline on a dead writer";
  // A writer mid-store that is alive (this process) is waited for, up to the deadline: a read
  // with a short deadline fails only once that deadline has passed (not at once, as above) ...
  SeqlockCellTestPeer::BeginStore(cell);
  const Deadline shortly = Deadline::AfterMs(50);
  EXPECT_FALSE(cell->Load(&out, shortly));
  EXPECT_TRUE(shortly.Expired()) << "the reader gave up on a live writer before its deadline";
  // ... and one with a long deadline gets the value that the writer then finishes storing (the
  // next store also repairs the cell).
  std::atomic<int> storing{0};
  std::thread finisher([&] {
    storing.store(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    w.v[0] = 8;
    cell->Store(w);
  });
  while (storing.load() == 0) std::this_thread::yield();
  const bool got = cell->Load(&out, Deadline::AfterMs(20000));
  finisher.join();
  ASSERT_TRUE(got) << "the reader did not wait for the live writer's store";
  EXPECT_EQ(out.v[0], 8u);
  ASSERT_TRUE(cell->Load(&out));
  EXPECT_EQ(out.v[0], 8u);
}

}  // namespace
}  // namespace marlaas

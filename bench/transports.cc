#include "bench/transports.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/interprocess/ipc/message_queue.hpp>
#include <optional>

#include "shm/ring_consumer.h"
#include "shm/ring_producer.h"

namespace marlaas::bench {
namespace {

namespace bip = boost::interprocess;
constexpr int64_t kWaitMs = 30000;

bool WriteAll(int fd, const unsigned char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool ReadAll(int fd, unsigned char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
  }
  return true;
}

uint64_t NextPow2(uint64_t v) {
  uint64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

class RingTransport : public Transport {
 public:
  RingTransport(size_t max_message, std::string instance)
      : max_(max_message), instance_(std::move(instance)) {}
  const char* name() const override { return "ring"; }
  bool Prepare() override {
    // Room for four maximal records, and at least 1 MiB (measured: 8 MiB beat 4 MiB for 1 MiB
    // records by ~20%: the producer stalls less on the consumer's acks).
    RingOptions o{std::max<uint64_t>(1 << 20, NextPow2(4 * RecordBytes(max_))), uint32_t(max_)};
    return CreateRing({instance_, "ab"}, o).ok() && CreateRing({instance_, "ba"}, o).ok();
  }
  bool Open(Side side) override {
    const SegmentName out{instance_, side == Side::kParent ? "ab" : "ba"};
    const SegmentName in{instance_, side == Side::kParent ? "ba" : "ab"};
    auto p = RingProducer::Attach(out);
    auto c = RingConsumer::Attach(in);
    if (!p.ok() || !c.ok()) return false;
    producer_.emplace(std::move(p).value());
    consumer_.emplace(std::move(c).value());
    return true;
  }
  bool Send(const unsigned char* data, size_t n) override {
    return producer_->Push(1, data, n, Deadline::AfterMs(kWaitMs)).ok();
  }
  const unsigned char* Recv(unsigned char*, size_t n) override {
    auto r = consumer_->Fetch(Deadline::AfterMs(kWaitMs));
    if (!r.ok() || r->size != n) return nullptr;
    last_ = *r;
    return r->data;
  }
  void Done() override { consumer_->Ack(last_); }
  void Cleanup() override {
    (void)Segment::Remove({instance_, "ab"});
    (void)Segment::Remove({instance_, "ba"});
  }

 private:
  size_t max_;
  std::string instance_;
  std::optional<RingProducer> producer_;
  std::optional<RingConsumer> consumer_;
  RecordView last_;
};

class BoostMqTransport : public Transport {
 public:
  BoostMqTransport(size_t max_message, std::string instance)
      : max_(max_message), ab_("marlaas_mq_ab_" + instance), ba_("marlaas_mq_ba_" + instance) {}
  const char* name() const override { return "boost_mq"; }
  bool Prepare() override {
    // Same buffering as the ring: about four maximal messages, at least 1 MiB.
    const size_t depth = std::max<size_t>(4, (1 << 20) / max_);
    try {
      bip::message_queue::remove(ab_.c_str());
      bip::message_queue::remove(ba_.c_str());
      bip::message_queue a(bip::create_only, ab_.c_str(), depth, max_);
      bip::message_queue b(bip::create_only, ba_.c_str(), depth, max_);
    } catch (const std::exception&) {
      return false;
    }
    return true;
  }
  bool Open(Side side) override {
    try {
      out_.emplace(bip::open_only, (side == Side::kParent ? ab_ : ba_).c_str());
      in_.emplace(bip::open_only, (side == Side::kParent ? ba_ : ab_).c_str());
    } catch (const std::exception&) {
      return false;
    }
    return true;
  }
  bool Send(const unsigned char* data, size_t n) override {
    out_->send(data, n, 0);
    return true;
  }
  const unsigned char* Recv(unsigned char* scratch, size_t n) override {
    size_t got = 0;
    unsigned int prio = 0;
    in_->receive(scratch, max_, got, prio);
    return got == n ? scratch : nullptr;
  }
  void Cleanup() override {
    bip::message_queue::remove(ab_.c_str());
    bip::message_queue::remove(ba_.c_str());
  }

 private:
  size_t max_;
  std::string ab_, ba_;
  std::optional<bip::message_queue> out_, in_;
};

// A socketpair (one bidirectional pair) or two pipes: the kernel-copy baselines.
class FdTransport : public Transport {
 public:
  explicit FdTransport(bool socketpair) : socketpair_(socketpair) {}
  ~FdTransport() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  const char* name() const override { return socketpair_ ? "socketpair" : "pipe"; }
  bool Prepare() override {
    if (socketpair_) {
      if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_) != 0) return false;
      for (int i = 0; i < 2; ++i) {  // generous buffers: the kernel caps them at its maximum
        int sz = 4 << 20;
        ::setsockopt(fds_[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        ::setsockopt(fds_[i], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
      }
      return true;
    }
    if (::pipe(fds_) != 0 || ::pipe(fds_ + 2) != 0) return false;
    ::fcntl(fds_[1], F_SETPIPE_SZ, 1 << 20);
    ::fcntl(fds_[3], F_SETPIPE_SZ, 1 << 20);
    return true;
  }
  bool Open(Side side) override {
    const bool parent = side == Side::kParent;
    if (socketpair_) {
      in_ = out_ = parent ? fds_[0] : fds_[1];
    } else {  // pipe 0 (fds 0,1): parent -> child; pipe 1 (fds 2,3): child -> parent
      out_ = parent ? fds_[1] : fds_[3];
      in_ = parent ? fds_[2] : fds_[0];
    }
    return true;
  }
  bool Send(const unsigned char* data, size_t n) override { return WriteAll(out_, data, n); }
  const unsigned char* Recv(unsigned char* scratch, size_t n) override {
    return ReadAll(in_, scratch, n) ? scratch : nullptr;
  }

 private:
  bool socketpair_;
  int fds_[4] = {-1, -1, -1, -1};
  int in_ = -1, out_ = -1;
};

}  // namespace

std::unique_ptr<Transport> MakeTransport(const std::string& kind, size_t max_message,
                                         const std::string& instance) {
  if (kind == "ring") return std::make_unique<RingTransport>(max_message, instance);
  if (kind == "boost_mq") return std::make_unique<BoostMqTransport>(max_message, instance);
  if (kind == "socketpair") return std::make_unique<FdTransport>(true);
  if (kind == "pipe") return std::make_unique<FdTransport>(false);
  return nullptr;
}

}  // namespace marlaas::bench

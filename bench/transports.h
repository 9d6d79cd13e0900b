// Two-way byte-message links between a parent and a forked child, over the transports that
// bench_ring compares: our Ring, Boost.Interprocess message_queue, a Unix socketpair and pipes.
// Usage: Make(), Prepare() in the parent before fork(), then Open(kParent) / Open(kChild) in each
// process, then Send/Recv. Messages have a size both sides know. Not thread-safe.
#pragma once

#include <memory>
#include <string>

namespace marlaas::bench {

enum class Side { kParent, kChild };

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Creates the shared objects; called once in the parent before fork().
  virtual bool Prepare() = 0;
  // Attaches this process's ends; called once in each process after fork().
  virtual bool Open(Side side) = 0;
  // Sends one message of n bytes to the other side.
  virtual bool Send(const unsigned char* data, size_t n) = 0;
  // Receives one message of n bytes; `scratch` holds n bytes for transports that copy.
  // Returns a pointer to the message (zero-copy transports point into shared memory).
  virtual const unsigned char* Recv(unsigned char* scratch, size_t n) = 0;
  // Releases what Recv returned (the ring acks it here).
  virtual void Done() {}
  // Removes the shared objects; parent only, after the child exited.
  virtual void Cleanup() {}
};

// kind: "ring" | "boost_mq" | "socketpair" | "pipe"; max_message: the largest n used.
std::unique_ptr<Transport> MakeTransport(const std::string& kind, size_t max_message,
                                         const std::string& instance);

}  // namespace marlaas::bench

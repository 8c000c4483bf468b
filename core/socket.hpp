// socket.hpp - TCP and Unix socket helpers for the bootstrap: RAII fds, addresses, and send/recv/
// connect/accept that are all bounded by a Deadline and interruptible by an abort flag.
//
// Not used on any data path: every call here may block (bounded) and make syscalls freely.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/clock.hpp"
#include "core/status.hpp"

namespace zcoll {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// An IPv4 or IPv6 socket address, trivially copyable so it can travel in bootstrap messages.
struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;

  int family() const { return storage.ss_family; }
  int port() const;
  void setPort(int port);
  std::string toString() const;
};

// Resolves host (name or literal) and port; prefers IPv4.
Status resolveAddress(const std::string& host, int port, SockAddr* out);
// The first address of interface `ifname`; an empty name means loopback (127.0.0.1).
Status interfaceAddress(const std::string& ifname, SockAddr* out);

// Non-blocking listening socket on `addr` (port 0 = any); *bound gets the actual address.
Status listenTcp(const SockAddr& addr, int backlog, Fd* out, SockAddr* bound);
// Connects, retrying refused connections until the deadline (the listener may not be up yet).
Status connectTcp(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort, Fd* out);
// Accepts one connection (non-blocking listener) before the deadline.
Status acceptOne(int listenFd, Deadline deadline, const std::atomic<bool>* abort, Fd* out, SockAddr* peer);

// What a listener makes of a connection whose hello arrived (acceptHellos).
enum class HelloVerdict {
  Keep,  // the judge took the connection
  Drop,  // a stranger or a duplicate: closed, logged with the reason, accepting goes on
  Fail,  // a peer that cannot work with this rank (its settings differ): accepting stops with the reason
};
struct HelloJudgement {
  HelloVerdict verdict = HelloVerdict::Drop;
  Status reason;  // Drop, Fail: why
};
using HelloJudge = std::function<HelloJudgement(const void* hello, Fd* fd, const SockAddr& from)>;
// Accepts connections on listenFd and reads a helloBytes-long hello from each, all at once (poll), until
// `want` were kept: a connection that is silent for kHelloBudgetMs, closes early, or that judge drops is
// closed without holding up the others (a stranger cannot stall a listener). what/rank label messages.
inline constexpr int64_t kHelloBudgetMs = 5000;
Status acceptHellos(int listenFd, size_t helloBytes, int want, Deadline deadline, const std::atomic<bool>* abort,
                    const HelloJudge& judge, std::string_view what, int rank);

// An accept() that failed for want of descriptors, said plainly (with the limit and the fix).
Status descriptorLimitError(std::string_view what, int err);
// Raises this process's soft limit of open files to the hard limit (once; a job of many ranks holds
// a socket per rank at the root). Returns the soft limit in force.
int64_t raiseFileLimit();

Status sendAll(int fd, const void* data, size_t bytes, Deadline deadline, const std::atomic<bool>* abort);
Status recvAll(int fd, void* data, size_t bytes, Deadline deadline, const std::atomic<bool>* abort);

// Local address of a connected socket (the interface that reaches the peer).
Status localAddress(int fd, SockAddr* out);

}  // namespace zcoll

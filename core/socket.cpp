// socket.cpp - bounded, abortable socket helpers (see socket.hpp).
#include "core/socket.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/log.hpp"

namespace zcoll {
namespace {

bool aborted(const std::atomic<bool>* abort) { return abort && abort->load(std::memory_order_relaxed); }

Status abortedStatus(std::string_view what) {
  return Status(StatusCode::Aborted, fmt::format("{}: communicator aborted", what));
}


// Waits until fd is ready for `events`, in slices of at most 100 ms so abort is seen promptly.
Status pollFor(int fd, short events, Deadline deadline, const std::atomic<bool>* abort, std::string_view what) {
  for (;;) {
    if (aborted(abort)) return abortedStatus(what);
    if (deadline.passed()) return timeoutError("{}: timed out", what);
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, deadline.remainingMsForPoll());
    if (r > 0) return Status::ok();
    if (r < 0 && errno != EINTR) return systemError(fmt::format("{}: poll", what), errno);
  }
}

}  // namespace

int SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return -1;
}

void SockAddr::setPort(int port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(static_cast<uint16_t>(port));
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(static_cast<uint16_t>(port));
}

std::string SockAddr::toString() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof host);
    return fmt::format("{}:{}", host, port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, port());
  }
  return "(no address)";
}

Status resolveAddress(const std::string& host, int port, SockAddr* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0) return invalidArgument("cannot resolve host '{}': {}", host, gai_strerror(rc));
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a; a = a->ai_next)
    if (a->ai_family == AF_INET) { pick = a; break; }
  SockAddr s;
  std::memcpy(&s.storage, pick->ai_addr, pick->ai_addrlen);
  s.len = pick->ai_addrlen;
  s.setPort(port);
  freeaddrinfo(res);
  *out = s;
  return Status::ok();
}

Status interfaceAddress(const std::string& ifname, SockAddr* out) {
  if (ifname.empty()) return resolveAddress("127.0.0.1", 0, out);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return systemError("getifaddrs", errno);
  Status st = invalidArgument("ZCOLL_SOCKET_IFNAME='{}': no interface of that name has an IP address", ifname);
  for (int wanted : {AF_INET, AF_INET6}) {
    for (ifaddrs* i = list; i && !st; i = i->ifa_next) {
      if (!i->ifa_addr || ifname != i->ifa_name || i->ifa_addr->sa_family != wanted) continue;
      SockAddr s;
      s.len = wanted == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&s.storage, i->ifa_addr, s.len);
      *out = s;
      st = Status::ok();
    }
  }
  freeifaddrs(list);
  return st;
}

Status listenTcp(const SockAddr& addr, int backlog, Fd* out, SockAddr* bound) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return systemError("socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0)
    return systemError(fmt::format("bind to {}", addr.toString()), errno);
  if (::listen(fd.get(), backlog) != 0) return systemError("listen", errno);
  SockAddr b;
  b.len = sizeof b.storage;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&b.storage), &b.len) != 0)
    return systemError("getsockname", errno);
  *bound = b;
  *out = std::move(fd);
  return Status::ok();
}

Status connectTcp(const SockAddr& addr, Deadline deadline, const std::atomic<bool>* abort, Fd* out) {
  int64_t backoffMs = 1;
  int lastErr = 0;
  while (!deadline.passed()) {
    if (aborted(abort)) return abortedStatus("connect");
    Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return systemError("socket", errno);
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int pr = 0;
      while ((pr = ::poll(&p, 1, deadline.remainingMsForPoll())) == 0 || (pr < 0 && errno == EINTR)) {
        if (deadline.passed() || aborted(abort)) break;
      }
      int err = ETIMEDOUT;
      socklen_t len = sizeof err;
      if (pr > 0) getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      int one = 1;
      setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      *out = std::move(fd);
      return Status::ok();
    }
    lastErr = errno;
    if (lastErr != ECONNREFUSED && lastErr != ETIMEDOUT && lastErr != ECONNRESET && lastErr != EAGAIN &&
        lastErr != EHOSTUNREACH && lastErr != ENETUNREACH)
      return systemError(fmt::format("connect to {}", addr.toString()), lastErr);
    struct timespec ts{0, static_cast<long>(std::min<int64_t>(backoffMs, 100)) * 1'000'000};
    nanosleep(&ts, nullptr);
    backoffMs = std::min<int64_t>(backoffMs * 2, 100);  // doubled unbounded, it overflowed after ~6 s of retries
  }
  return timeoutError("connect to {}: nobody answered before the timeout (last error: {})", addr.toString(),
                      lastErr ? std::strerror(lastErr) : "none");
}

Status acceptOne(int listenFd, Deadline deadline, const std::atomic<bool>* abort, Fd* out, SockAddr* peer) {
  for (;;) {
    SockAddr a;
    a.len = sizeof a.storage;
    int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&a.storage), &a.len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      out->reset(fd);
      if (peer) *peer = a;
      return Status::ok();
    }
    if (errno == EMFILE || errno == ENFILE) return descriptorLimitError("accept", errno);
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      return systemError("accept", errno);
    if (Status s = pollFor(listenFd, POLLIN, deadline, abort, "accept"); !s) return s;
  }
}

Status descriptorLimitError(std::string_view what, int err) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  return systemError(fmt::format("{}: out of file descriptors (open-file limit {}, hard limit {}): raise it with "
                                 "`ulimit -n`",
                                 what, static_cast<int64_t>(lim.rlim_cur), static_cast<int64_t>(lim.rlim_max)),
                     err);
}

int64_t raiseFileLimit() {
  static std::once_flag once;
  std::call_once(once, [] {
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
    const rlim_t old = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) == 0)
      ZCOLL_INFO(Init, -1, "open-file limit raised from {} to {}", static_cast<int64_t>(old), static_cast<int64_t>(lim.rlim_max));
  });
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  return static_cast<int64_t>(lim.rlim_cur);
}

namespace {
struct PendingHello {
  Fd fd;
  SockAddr from;
  std::vector<char> hello;
  size_t got = 0;
  int64_t startNs = 0;
};
constexpr size_t kMaxPendingHellos = 1024;
}  // namespace

Status acceptHellos(int listenFd, size_t helloBytes, int want, Deadline deadline, const std::atomic<bool>* abort,
                    const HelloJudge& judge, std::string_view what, int rank) {
  std::vector<PendingHello> pending;
  std::vector<pollfd> fds;
  auto drop = [&](size_t i, std::string_view why) {
    ZCOLL_WARN(Boot, rank, "{}: dropped connection from {}: {}", what, pending[i].from.toString(), why);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };
  for (int kept = 0; kept < want;) {
    if (aborted(abort)) return abortedStatus(what);
    if (deadline.passed()) return timeoutError("{}: timed out ({} of {} connections)", what, kept, want);
    fds.clear();
    fds.push_back({listenFd, POLLIN, 0});
    for (const PendingHello& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), deadline.remainingMsForPoll()) < 0 && errno != EINTR)
      return systemError(fmt::format("{}: poll", what), errno);
    for (;;) {  // every connection waiting at the listener
      PendingHello p;
      p.from.len = sizeof p.from.storage;
      const int fd = ::accept4(listenFd, reinterpret_cast<sockaddr*>(&p.from.storage), &p.from.len,
                               SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        // accept(2): the new connection's pending network errors come back here; try the next one.
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == ENETDOWN || errno == ENOPROTOOPT ||
            errno == EHOSTDOWN || errno == ENONET || errno == EHOSTUNREACH || errno == EOPNOTSUPP ||
            errno == ENETUNREACH)
          continue;
        if (errno == EMFILE || errno == ENFILE) return descriptorLimitError(fmt::format("{}: accept", what), errno);
        return systemError(fmt::format("{}: accept", what), errno);
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      p.fd.reset(fd);
      p.hello.resize(helloBytes);
      p.startNs = nowNs();
      if (pending.size() >= kMaxPendingHellos) drop(0, "too many connections waiting for their hello");
      pending.push_back(std::move(p));
    }
    const int64_t now = nowNs();
    for (size_t i = 0; i < pending.size();) {
      PendingHello& p = pending[i];
      ssize_t n = 1;
      while (p.got < helloBytes && (n = ::recv(p.fd.get(), p.hello.data() + p.got, helloBytes - p.got, MSG_DONTWAIT)) > 0)
        p.got += static_cast<size_t>(n);
      if (p.got < helloBytes) {
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          drop(i, fmt::format("closed after {} of {} bytes", p.got, helloBytes));
        } else if (now - p.startNs > kHelloBudgetMs * 1'000'000) {
          drop(i, fmt::format("no hello within {} ms", kHelloBudgetMs));
        } else {
          ++i;
        }
        continue;
      }
      HelloJudgement j = judge(p.hello.data(), &p.fd, p.from);
      if (j.verdict == HelloVerdict::Fail) return std::move(j.reason);
      if (j.verdict == HelloVerdict::Keep) {
        ++kept;
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        drop(i, j.reason.message());
      }
    }
  }
  return Status::ok();
}

Status sendAll(int fd, const void* data, size_t bytes, Deadline deadline, const std::atomic<bool>* abort) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return systemError("send", errno);
    if (Status s = pollFor(fd, POLLOUT, deadline, abort, "send"); !s) return s;
  }
  return Status::ok();
}

Status recvAll(int fd, void* data, size_t bytes, Deadline deadline, const std::atomic<bool>* abort) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return remoteError("connection closed by the peer");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return systemError("recv", errno);
    if (Status s = pollFor(fd, POLLIN, deadline, abort, "recv"); !s) return s;
  }
  return Status::ok();
}

Status localAddress(int fd, SockAddr* out) {
  SockAddr a;
  a.len = sizeof a.storage;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) return systemError("getsockname", errno);
  *out = a;
  return Status::ok();
}

}  // namespace zcoll

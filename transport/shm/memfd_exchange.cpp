// memfd_exchange.cpp - SCM_RIGHTS over abstract Unix sockets (see memfd_exchange.hpp).
#include "transport/shm/memfd_exchange.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

#include "core/log.hpp"

namespace zcoll::shm {
namespace {

constexpr uint32_t kMagic = 0x7a4d4644u;  // "zMFD"

struct Message {
  uint32_t magic;
  int32_t rank;
  uint64_t nonce;
  uint8_t secret[16];
};

sockaddr_un abstractName(uint64_t nonce, int rank, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "zcoll-%016llx-%d",
                        static_cast<unsigned long long>(nonce), rank);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

// A Message and room for one descriptor, as sendmsg/recvmsg take them.
struct FdEnvelope {
  explicit FdEnvelope(Message* m) : iov{m, sizeof *m} {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdEnvelope(const FdEnvelope&) = delete;
  FdEnvelope& operator=(const FdEnvelope&) = delete;
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
};

Status sendFd(int sock, const Message& m, int fd) {
  FdEnvelope e(const_cast<Message*>(&m));
  msghdr& msg = e.msg;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof m)) return Status::ok();
    if (n < 0 && errno == EINTR) continue;
    return systemError("sendmsg(memfd)", n < 0 ? errno : EPROTO);
  }
}

// One non-blocking try at a connection's message and its fd (*fd stays invalid if it carried none):
// true when it is in (*err says whether it is whole), false when nothing has arrived yet.
bool tryRecvFd(int sock, Message* m, Fd* fd, Status* err) {
  FdEnvelope e(m);
  msghdr& msg = e.msg;
  const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n < 0) {
    *err = systemError("recvmsg(memfd)", errno);
    return true;
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int received = -1;
      std::memcpy(&received, CMSG_DATA(c), sizeof received);
      fd->reset(received);
    }
  }
  *err = n == static_cast<ssize_t>(sizeof *m) ? Status::ok() : remoteError("short memfd message ({} bytes)", n);
  return true;
}

}  // namespace

Status exchangeMemfds(Bootstrap& boot, const std::vector<int>& peers, int myFd, Deadline deadline,
                      const std::atomic<bool>* abort, std::vector<Fd>* fds) {
  const int rank = boot.rank();
  Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return systemError("socket(AF_UNIX)", errno);
  socklen_t len = 0;
  sockaddr_un name = abstractName(boot.nonce(), rank, &len);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&name), len) != 0)
    return systemError("bind(abstract unix socket)", errno);
  if (::listen(listener.get(), static_cast<int>(peers.size()) + 64) != 0) return systemError("listen(unix)", errno);
  if (Status s = boot.barrier(); !s) return std::move(s).withContext("memfd exchange: barrier");

  Message mine{};
  mine.magic = kMagic;
  mine.rank = rank;
  mine.nonce = boot.nonce();
  std::memcpy(mine.secret, boot.secret().data(), 16);
  for (int peer : peers) {
    Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s.valid()) return systemError("socket(AF_UNIX)", errno);
    sockaddr_un to = abstractName(boot.nonce(), peer, &len);
    if (::connect(s.get(), reinterpret_cast<sockaddr*>(&to), len) != 0)
      return systemError(fmt::format("connect to rank {}'s memfd socket", peer), errno);
    if (Status st = sendFd(s.get(), mine, myFd); !st) return std::move(st).withContext(fmt::format("to rank {}", peer));
  }

  fds->clear();
  fds->resize(static_cast<size_t>(boot.nranks()));
  // Every pending connection is read side by side (poll), each with its own 5 s budget: silent
  // connections to the socket cannot stall the exchange.
  struct Pending {
    Fd fd;
    int64_t startNs;
  };
  std::vector<Pending> pending;
  std::vector<pollfd> polled;
  auto drop = [&](size_t i, std::string_view why) {
    ZCOLL_WARN(Shm, rank, "memfd exchange: dropped a connection: {}", why);
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
  };
  size_t received = 0;
  while (received < peers.size()) {
    if (abort && abort->load()) return Status(StatusCode::Aborted, "memfd exchange: aborted");
    if (deadline.passed())
      return timeoutError("memfd exchange: rank {} got {} of {} segments: timed out", rank, received, peers.size());
    polled.assign(1, pollfd{listener.get(), POLLIN, 0});
    for (const Pending& p : pending) polled.push_back({p.fd.get(), POLLIN, 0});
    ::poll(polled.data(), polled.size(), deadline.remainingMsForPoll());
    for (;;) {
      const int c = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (c >= 0) {
        pending.push_back({Fd(c), nowNs()});
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) return descriptorLimitError("memfd exchange: accept", errno);
      if (errno != EAGAIN && errno != EWOULDBLOCK) return systemError("memfd exchange: accept", errno);
      break;
    }
    for (size_t i = 0; i < pending.size();) {
      Message m{};
      Fd fd;
      Status s;
      if (!tryRecvFd(pending[i].fd.get(), &m, &fd, &s)) {
        if (nowNs() - pending[i].startNs > kHelloBudgetMs * 1'000'000) drop(i, "no message within 5000 ms");
        else ++i;
        continue;
      }
      Secret got;
      std::memcpy(got.data(), m.secret, 16);
      bool known = false;
      for (int p : peers) known |= p == m.rank;
      if (s && m.magic == kMagic && m.nonce == boot.nonce() && secretsEqual(got, boot.secret()) && known &&
          fd.valid() && !(*fds)[m.rank].valid()) {
        (*fds)[m.rank] = std::move(fd);
        ++received;
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      drop(i, s ? "not a peer of this communicator" : s.message());
    }
  }
  return Status::ok();
}

}  // namespace zcoll::shm

// memfd_exchange.cpp - SCM_RIGHTS over abstract Unix sockets (see memfd_exchange.hpp).
#include "transport/shm/memfd_exchange.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>

#include "comm/log.hpp"

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

Status sendFd(int sock, const Message& m, int fd) {
  iovec iov{const_cast<Message*>(&m), sizeof m};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
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

// Receives one message and its fd; *fd stays invalid if the message carried none.
Status recvFd(int sock, Deadline deadline, const std::atomic<bool>* abort, Message* m, Fd* fd) {
  for (;;) {
    iovec iov{m, sizeof *m};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n >= 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          int received = -1;
          std::memcpy(&received, CMSG_DATA(c), sizeof received);
          fd->reset(received);
        }
      }
      if (n != static_cast<ssize_t>(sizeof *m)) return remoteError("short memfd message ({} bytes)", n);
      return Status::ok();
    }
    if (errno != EAGAIN && errno != EINTR) return systemError("recvmsg(memfd)", errno);
    if (abort && abort->load()) return Status(StatusCode::Aborted, "memfd exchange: aborted");
    if (deadline.passed()) return timeoutError("memfd exchange: no message before the timeout");
    pollfd p{sock, POLLIN, 0};
    ::poll(&p, 1, deadline.remainingMsForPoll());
  }
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
  size_t received = 0;
  while (received < peers.size()) {
    Fd c;
    if (Status s = acceptOne(listener.get(), deadline, abort, &c, nullptr); !s)
      return std::move(s).withContext(fmt::format("memfd exchange: rank {} got {} of {} segments", rank, received,
                                                  peers.size()));
    Message m{};
    Fd fd;
    Deadline helloDeadline = Deadline::atNs(std::min(deadline.ns(), nowNs() + 5'000'000'000));
    Status s = recvFd(c.get(), helloDeadline, abort, &m, &fd);
    Secret got;
    std::memcpy(got.data(), m.secret, 16);
    bool known = false;
    for (int p : peers) known |= p == m.rank;
    if (s && m.magic == kMagic && m.nonce == boot.nonce() && secretsEqual(got, boot.secret()) && known &&
        fd.valid() && !(*fds)[m.rank].valid()) {
      (*fds)[m.rank] = std::move(fd);
      ++received;
      continue;
    }
    if (s.code() == StatusCode::Aborted) return s;
    ZCOLL_WARN(Shm, rank, "memfd exchange: dropped a connection: {}", s ? "not a peer of this communicator" : s.message());
  }
  return Status::ok();
}

}  // namespace zcoll::shm

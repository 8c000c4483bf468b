// rendezvous_root.cpp - the root side of the bootstrap rendezvous (see bootstrap.hpp).
//
// One thread per unique id. It polls the listening socket and every pending connection, so a
// stranger that connects and says nothing cannot hold up the others: a connection that does not
// deliver a valid Hello within kHelloTimeoutMs, or presents a wrong secret, is logged and closed.
// After the reply it watches the ranks' connections until each reports its communicator created, and
// names the first rank that left before that to all the others (bootstrap_wire.hpp).
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <cstring>
#include <list>
#include <mutex>
#include <thread>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/bootstrap_wire.hpp"
#include "bootstrap/tree.hpp"
#include "core/log.hpp"

namespace zcoll {
namespace {

constexpr int64_t kHelloTimeoutMs = 5000;
constexpr size_t kMaxPending = 1024;
constexpr int kAcceptsPerRound = 256;
std::atomic<int64_t> gLastSent{0}, gLastReceived{0};  // the last service that ended here

struct Pending {
  Fd fd;
  SockAddr from;
  wire::Hello hello{};
  size_t got = 0;
  int64_t startNs = 0;
};

class RootService {
 public:
  RootService(Fd listen, const SockAddr& bound, const Secret& secret, int64_t timeoutMs)
      : listen_(std::move(listen)), bound_(bound), secret_(secret), timeoutMs_(timeoutMs),
        deadline_(Deadline::afterMs(timeoutMs)) {}

  void startThread() {
    thread_ = std::thread([this] {
      run();
      gLastSent.store(bytesSent_);
      gLastReceived.store(bytesReceived_);
    });
  }
  void stopAndJoin() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Waits for the service to end by itself (it ends once every rank got its reply).
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  bool finished() const { return finished_.load(); }
  // In a child after fork(): the thread does not exist there; close our copy of the socket.
  void forgetAfterFork() {
    listen_.reset();
    for (Pending& p : pending_) p.fd.reset();
    for (Pending& p : joined_) p.fd.reset();
  }
  bool matches(const SockAddr& root, const Secret& secret) const {
    return root.port() == bound_.port() && secretsEqual(secret, secret_);
  }

 private:
  void run();
  bool readHello(Pending& p);  // false: drop the connection
  void replyAll(int32_t code, const std::string& message);
  void watchCreation();  // after a successful reply (bootstrap_wire.hpp: kCreated, Notice)
  void sendNotice(int32_t rank, const std::string& message, size_t except);

  Fd listen_;
  SockAddr bound_;
  Secret secret_;
  int64_t timeoutMs_;
  Deadline deadline_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::list<Pending> pending_;
  std::vector<Pending> joined_;  // by rank
  int nranks_ = -1;
  int count_ = 0;
  bool noticeSent_ = false;  // the first rank that left is named once
  int64_t bytesSent_ = 0, bytesReceived_ = 0;
};

bool RootService::readHello(Pending& p) {
  auto* buf = reinterpret_cast<char*>(&p.hello);
  for (;;) {
    ssize_t n = ::recv(p.fd.get(), buf + p.got, sizeof p.hello - p.got, MSG_DONTWAIT);
    if (n > 0) {
      p.got += static_cast<size_t>(n);
      bytesReceived_ += n;
      if (p.got == sizeof p.hello) break;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;  // more later
    ZCOLL_WARN(Boot, -1, "rendezvous {}: dropped connection from {}: closed after {} of {} bytes",
               bound_.toString(), p.from.toString(), p.got, sizeof p.hello);
    return false;
  }
  if (Status s = wire::checkHello(p.hello, secret_); !s) {
    ZCOLL_WARN(Boot, -1, "rendezvous {}: dropped connection from {}: {}", bound_.toString(), p.from.toString(),
               s.message());
    return false;
  }
  return true;
}

void RootService::replyAll(int32_t code, const std::string& message) {
  wire::Reply r{};
  r.magic = wire::kReplyMagic;
  r.code = code;
  std::snprintf(r.message, sizeof r.message, "%s", message.c_str());
  Secret nonceBytes{};
  (void)randomSecret(&nonceBytes);
  std::memcpy(&r.nonce, nonceBytes.data(), sizeof r.nonce);
  std::vector<PeerInfo> table;  // for rank 0 alone: it goes down the tree from there
  if (code == 0) {
    table.resize(static_cast<size_t>(nranks_));
    for (int i = 0; i < nranks_; ++i) table[i] = joined_[i].hello.info;
  }
  Deadline d = Deadline::afterMs(std::max<int64_t>(1000, deadline_.remainingNs() / 1'000'000));
  int lost = -1;  // a rank the reply did not reach: the others must not wait for it
  for (Pending& p : joined_) {
    if (!p.fd.valid()) continue;
    const int rank = p.hello.rank;
    r.parent = SockAddr{};
    if (code == 0 && rank > 0) r.parent = table[static_cast<size_t>(treeNode(rank, nranks_).parent)].listen;
    Status s = sendAll(p.fd.get(), &r, sizeof r, d, &stop_);
    if (s) bytesSent_ += sizeof r;
    if (s && code == 0 && rank == 0) {
      s = sendAll(p.fd.get(), table.data(), table.size() * sizeof(PeerInfo), d, &stop_);
      if (s) bytesSent_ += table.size() * sizeof(PeerInfo);
    }
    if (!s) ZCOLL_WARN(Boot, -1, "rendezvous: reply to rank {} failed: {}", rank, s.message());
    if (!s && lost < 0) lost = rank;
    if (!s || code != 0) p.fd.reset();  // on success kept: watchCreation
  }
  if (code == 0 && lost >= 0) {
    sendNotice(lost, fmt::format("rank {} could not be told the peer table (its connection to the rendezvous root "
                                 "failed)", lost), SIZE_MAX);
    noticeSent_ = true;
  }
}

void RootService::sendNotice(int32_t rank, const std::string& message, size_t except) {
  wire::Notice n{};
  n.magic = wire::kNoticeMagic;
  n.rank = rank;
  std::snprintf(n.message, sizeof n.message, "%s", message.c_str());
  const Deadline d = Deadline::afterMs(1000);
  for (size_t i = 0; i < joined_.size(); ++i)
    if (i != except && joined_[i].fd.valid()) (void)sendAll(joined_[i].fd.get(), &n, sizeof n, d, &stop_);
}

void RootService::watchCreation() {
  const Deadline deadline = Deadline::afterMs(timeoutMs_);
  std::vector<uint8_t> created(joined_.size(), 0);
  // epoll, not poll: the ranks report one by one, and each report then costs the root O(1) rather
  // than a poll of every rank's connection.
  Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  size_t open = 0;
  for (size_t i = 0; i < joined_.size(); ++i) {
    if (!joined_[i].fd.valid()) continue;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    if (!ep.valid() || ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, joined_[i].fd.get(), &ev) != 0) {
      ZCOLL_WARN(Boot, -1, "rendezvous {}: cannot watch creation (epoll: {})", bound_.toString(), std::strerror(errno));
      for (Pending& p : joined_) p.fd.reset();
      return;
    }
    ++open;
  }
  bool told = noticeSent_;
  std::vector<epoll_event> events(256);
  while (!stop_.load() && open > 0) {
    if (deadline.passed()) {
      sendNotice(-1, "the rendezvous root stops watching creation (timeout)", SIZE_MAX);
      break;
    }
    const int ready = ::epoll_wait(ep.get(), events.data(), static_cast<int>(events.size()),
                                   static_cast<int>(std::min<int64_t>(deadline.remainingMsForPoll(), 100)));
    for (int k = 0; k < ready; ++k) {
      const size_t i = static_cast<size_t>(events[static_cast<size_t>(k)].data.u64);
      Pending& p = joined_[i];
      if (!p.fd.valid()) continue;
      uint8_t byte = 0;
      const ssize_t n = ::recv(p.fd.get(), &byte, 1, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n == 1 && byte == wire::kCreated) {
        created[i] = 1;
        continue;
      }
      // Closed (or garbage) before kCreated: the first such rank is the cause, tell the others.
      if (!created[i] && !told) {
        const PeerInfo& info = p.hello.info;
        const std::string msg = fmt::format(
            "rank {} (pid {} on host {}) left before the communicator was created: it exited or failed (its own "
            "error says why)",
            p.hello.rank, info.pid, info.hostname);
        ZCOLL_WARN(Boot, -1, "rendezvous {}: {}", bound_.toString(), msg);
        sendNotice(p.hello.rank, msg, i);
        told = true;
      }
      p.fd.reset();  // closing it leaves the epoll set
      --open;
    }
  }
  for (Pending& p : joined_) p.fd.reset();
}

void RootService::run() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    if (nranks_ > 0 && count_ == nranks_) {
      replyAll(0, "");
      pending_.clear();
      listen_.reset();
      watchCreation();
      break;
    }
    if (deadline_.passed()) {
      std::string msg = fmt::format("rendezvous timed out: {} of {} ranks joined", count_,
                                    nranks_ > 0 ? std::to_string(nranks_) : std::string("?"));
      ZCOLL_WARN(Boot, -1, "{} ({})", msg, bound_.toString());
      replyAll(static_cast<int32_t>(StatusCode::Timeout), msg);
      break;
    }
    fds.clear();
    fds.push_back({listen_.get(), POLLIN, 0});
    for (Pending& p : pending_) fds.push_back({p.fd.get(), POLLIN, 0});
    int r = ::poll(fds.data(), fds.size(), 100);
    if (r < 0 && errno != EINTR) break;
    // New connections.
    for (int accepted = 0;;) {
      Pending p;
      p.from.len = sizeof p.from.storage;
      int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&p.from.storage), &p.from.len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {  // the listener stays readable: say so, stop
        const std::string msg =
            descriptorLimitError(fmt::format("rendezvous root {} with {} rank(s) joined", bound_.toString(), count_),
                                 errno)
                .message();
        ZCOLL_WARN(Boot, -1, "{}", msg);
        replyAll(static_cast<int32_t>(StatusCode::System), msg);
        pending_.clear();
        listen_.reset();
        finished_.store(true);
        return;
      }
      if (fd < 0) break;
      p.fd.reset(fd);
      p.startNs = nowNs();
      if (pending_.size() >= kMaxPending) pending_.pop_front();
      pending_.push_back(std::move(p));
      // A burst of more ranks than kMaxPending waits in the backlog, not in pending_, where the
      // first ones would be pushed out before their hellos are read.
      if (++accepted == kAcceptsPerRound) break;
    }
    // Progress pending connections.
    int64_t now = nowNs();
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool keep = readHello(*it);
      if (keep && it->got < sizeof it->hello && now - it->startNs > kHelloTimeoutMs * 1'000'000) {
        ZCOLL_WARN(Boot, -1, "rendezvous {}: dropped connection from {}: no hello within {} ms", bound_.toString(),
                   it->from.toString(), kHelloTimeoutMs);
        keep = false;
      }
      if (!keep) {
        it = pending_.erase(it);
        continue;
      }
      if (it->got < sizeof it->hello) {
        ++it;
        continue;
      }
      const wire::Hello& h = it->hello;
      if (nranks_ < 0) {
        nranks_ = h.nranks;
        joined_.resize(static_cast<size_t>(nranks_));
      }
      if (h.nranks != nranks_ || joined_[h.rank].fd.valid()) {
        std::string msg = h.nranks != nranks_
                              ? fmt::format("ranks disagree on nranks: {} and {}", nranks_, h.nranks)
                              : fmt::format("rank {} joined twice", h.rank);
        ZCOLL_WARN(Boot, -1, "rendezvous {}: {}", bound_.toString(), msg);
        joined_.push_back(std::move(*it));  // gets the error reply too
        pending_.erase(it);
        replyAll(static_cast<int32_t>(StatusCode::InvalidArgument), msg);
        finished_.store(true);
        return;
      }
      ZCOLL_TRACE(Boot, -1, "rendezvous: rank {} of {} joined from {}", h.rank, h.nranks, it->from.toString());
      joined_[h.rank] = std::move(*it);
      ++count_;
      it = pending_.erase(it);
    }
  }
  pending_.clear();
  listen_.reset();
  finished_.store(true);
}

std::mutex gRootsMutex;
std::list<std::unique_ptr<RootService>>& roots();

// fork() keeps only the calling thread: the child must neither join nor destroy the parent's
// service threads (their std::thread objects are copies), so it forgets them, leaking a few bytes.
void atforkPrepare() { gRootsMutex.lock(); }
void atforkParent() { gRootsMutex.unlock(); }
void atforkChild() {
  for (auto& r : roots()) {
    r->forgetAfterFork();
    (void)r.release();
  }
  roots().clear();
  gRootsMutex.unlock();
}
std::once_flag gAtforkOnce;

std::list<std::unique_ptr<RootService>>& roots() {
  // Joined at exit so that no service thread outlives the process's statics.
  static struct Holder {
    std::list<std::unique_ptr<RootService>> list;
    ~Holder() {
      for (auto& r : list) r->stopAndJoin();
    }
  } holder;
  return holder.list;
}

}  // namespace

Status RendezvousRoot::start(const SockAddr& bindAddr, const Secret& secret, int64_t timeoutMs, SockAddr* bound) {
  std::call_once(gAtforkOnce, [] { pthread_atfork(atforkPrepare, atforkParent, atforkChild); });
  // The logger first: statics are destroyed in reverse order, so the service threads (joined by
  // roots()'s holder at exit) are gone before the logger they may have used.
  (void)logEnabled(LogLevel::Warn, Subsys::Boot);
  raiseFileLimit();  // a socket per rank
  reap();
  Fd fd;
  SockAddr b;
  if (Status s = listenTcp(bindAddr, 4096, &fd, &b); !s) return std::move(s).withContext("rendezvous root");
  auto svc = std::make_unique<RootService>(std::move(fd), b, secret, timeoutMs);
  svc->startThread();
  std::lock_guard lock(gRootsMutex);
  roots().push_back(std::move(svc));
  *bound = b;
  return Status::ok();
}

namespace {
std::unique_ptr<RootService> take(const SockAddr& root, const Secret& secret) {
  std::unique_ptr<RootService> mine;
  {
    std::lock_guard lock(gRootsMutex);
    for (auto it = roots().begin(); it != roots().end(); ++it) {
      if ((*it)->matches(root, secret)) {
        mine = std::move(*it);
        roots().erase(it);
        break;
      }
    }
  }
  return mine;
}
}  // namespace

void RendezvousRoot::join(const SockAddr& root, const Secret& secret) {
  if (auto mine = take(root, secret)) mine->join();
}

void RendezvousRoot::cancel(const SockAddr& root, const Secret& secret) {
  if (auto mine = take(root, secret)) mine->stopAndJoin();
}

void RendezvousRoot::lastStats(int64_t* sent, int64_t* received) {
  *sent = gLastSent.load();
  *received = gLastReceived.load();
}

void RendezvousRoot::reap() {
  std::list<std::unique_ptr<RootService>> done;
  {
    std::lock_guard lock(gRootsMutex);
    for (auto it = roots().begin(); it != roots().end();) {
      if ((*it)->finished()) {
        done.push_back(std::move(*it));
        it = roots().erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& r : done) r->stopAndJoin();
}

}  // namespace zcoll

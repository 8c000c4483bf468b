// bootstrap.cpp - the rank side of the bootstrap: rendezvous, ring, allGather, barrier.
#include "bootstrap/bootstrap.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>

#include "bootstrap/bootstrap_wire.hpp"
#include "core/device.hpp"
#include "core/log.hpp"

namespace zcoll {

namespace {

// How long a creation that failed on a closed peer connection waits for the root's notice naming the
// rank that left (the root tells the ranks within microseconds of each other).
constexpr int64_t kNoticeGraceMs = 500;

// The header every bootstrap hello starts with: its kind, the wire version and the job's secret.
template <typename Hello>
void stamp(Hello* h, uint32_t magic, const Secret& secret) {
  h->magic = magic;
  h->version = wire::kVersion;
  std::memcpy(h->secret, secret.data(), secret.size());
}

}  // namespace

uint64_t localHostHash() {
  std::string key;
  std::ifstream bootId("/proc/sys/kernel/random/boot_id");
  std::getline(bootId, key);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  key += host;
  for (const char* ns : {"/proc/self/ns/net", "/proc/self/ns/ipc"}) {
    struct stat st{};
    if (stat(ns, &st) == 0) key += fmt::format(":{}:{}", st.st_dev, st.st_ino);
  }
  return fnv1a(key.data(), key.size());
}

Bootstrap::~Bootstrap() { (void)endCreation(Status(StatusCode::Internal, "bootstrap destroyed during creation")); }

void Bootstrap::watchRoot() {
  while (!stopWatch_.load()) {
    pollfd p[2] = {{root_.get(), POLLIN, 0}, {wakeWatch_.get(), POLLIN, 0}};
    if (::poll(p, 2, -1) <= 0 || !p[0].revents) continue;
    wire::Notice n{};
    Status s = recvAll(root_.get(), &n, sizeof n, Deadline::afterMs(1000), &stopWatch_);
    if (stopWatch_.load()) return;
    if (s && n.magic == wire::kNoticeMagic && n.rank == -1) return;  // the root stops watching
    n.message[sizeof n.message - 1] = 0;
    watchReason_ = s && n.magic == wire::kNoticeMagic
                       ? std::string(n.message)
                       : fmt::format("the rendezvous root is gone before the communicator was created: the process "
                                     "that made the unique id (usually rank 0's) exited or stopped it ({})",
                                     s ? std::string("malformed notice") : s.message());
    {
      std::lock_guard<std::mutex> lock(watchMu_);
      watchFired_.store(true);
    }
    watchCv_.notify_all();
    abort_->store(true);  // every wait of the creation returns within its 100 ms slice
    return;
  }
}

Status Bootstrap::endCreation(Status s) {
  if (creationEnded_) return s;
  creationEnded_ = true;
  // A peer that closed its connection under this rank has often failed on the root's notice that a
  // third rank left; the root sends that notice to every rank at once, so give it a moment to land here.
  if (watch_.joinable() && !s && s.code() == StatusCode::RemoteError) {
    std::unique_lock<std::mutex> lock(watchMu_);
    watchCv_.wait_for(lock, std::chrono::milliseconds(kNoticeGraceMs), [this] { return watchFired_.load(); });
  }
  if (watch_.joinable()) {
    stopWatch_.store(true);
    const uint64_t one = 1;
    while (::write(wakeWatch_.get(), &one, sizeof one) < 0 && errno == EINTR) {
    }
    watch_.join();
  }
  // A rank that refused the creation itself (settings that differ, no usable transport) says so, not
  // that another rank left: that rank refused it too, and its notice may come first.
  const bool ownRefusal = !s && (s.code() == StatusCode::InvalidArgument || s.code() == StatusCode::InvalidUsage ||
                                 s.code() == StatusCode::NotSupported);
  if (watchFired_.load() && !ownRefusal) {
    ZCOLL_WARN(Boot, rank_, "communicator creation stopped: {}", watchReason_);
    root_.reset();
    return remoteError("rank {}: {}", rank_, watchReason_);
  }
  if (root_.valid() && s) {
    const uint8_t created = wire::kCreated;
    (void)sendAll(root_.get(), &created, 1, Deadline::afterMs(1000), nullptr);
  }
  root_.reset();
  return s;
}

Status Bootstrap::create(const UniqueIdFields& id, int rank, int nranks, const Config& config,
                         std::atomic<bool>* abort, std::unique_ptr<Bootstrap>* out) {
  std::unique_ptr<Bootstrap> b(new Bootstrap());
  b->rank_ = rank;
  b->nranks_ = nranks;
  b->timeoutMs_ = config.timeoutMs;
  b->abort_ = abort;
  b->secret_ = id.secret;
  b->settings_ = sharedSettingsHash(config);
  b->tree_ = treeNode(rank, nranks);
  raiseFileLimit();  // sockets and segments per peer
  SockAddr parent;
  if (Status s = b->rendezvous(id, &parent); !s) return s;
  b->wakeWatch_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!b->wakeWatch_.valid())
    return errno == EMFILE || errno == ENFILE ? descriptorLimitError("eventfd for the creation watch", errno)
                                              : systemError("eventfd for the creation watch", errno);
  try {
    b->watch_ = std::thread([p = b.get()] { p->watchRoot(); });
  } catch (const std::system_error& e) {
    return systemError("starting the creation watch thread", e.code().value());
  }
  if (Status s = b->connectTree(parent); !s) return b->endCreation(std::move(s));
  *out = std::move(b);
  return Status::ok();
}

Status Bootstrap::send(int fd, const void* data, size_t bytes, Deadline deadline, std::string_view what, int peer) {
  if (Status s = sendAll(fd, data, bytes, deadline, abort_); !s)
    return std::move(s).withContext(fmt::format("{}: rank {} sending to rank {}", what, rank_, peer));
  counted(true, bytes);
  return Status::ok();
}

Status Bootstrap::recv(int fd, void* data, size_t bytes, Deadline deadline, std::string_view what, int peer) {
  if (Status s = recvAll(fd, data, bytes, deadline, abort_); !s)
    return std::move(s).withContext(fmt::format("{}: rank {} waiting for rank {}", what, rank_, peer));
  counted(false, bytes);
  return Status::ok();
}

void Bootstrap::counted(bool sent, size_t bytes) {
  ++(sent ? stats_.messagesSent : stats_.messagesReceived);
  (sent ? stats_.bytesSent : stats_.bytesReceived) += static_cast<int64_t>(bytes);
}

Status Bootstrap::rendezvous(const UniqueIdFields& id, SockAddr* parent) {
  Deadline deadline = Deadline::afterMs(timeoutMs_);
  Fd root;
  if (Status s = connectTcp(id.root, deadline, abort_, &root); !s)
    return std::move(s).withContext(fmt::format("rank {}: rendezvous with root {}", rank_, id.root.toString()));

  // Listen on the interface that reaches the root: peers reach us the same way.
  SockAddr local;
  if (Status s = localAddress(root.get(), &local); !s) return s;
  local.setPort(0);
  SockAddr bound;
  if (Status s = listenTcp(local, 4096, &listen_, &bound); !s) return std::move(s).withContext("bootstrap listen");

  wire::Hello h{};
  stamp(&h, wire::kHelloMagic, secret_);
  h.rank = rank_;
  h.nranks = nranks_;
  h.info.rank = rank_;
  h.info.pid = getpid();
  h.info.hostHash = localHostHash();
  h.info.device = deviceRuntime() ? 1 : 0;
  h.info.settings = settings_;
  if (sched_getaffinity(0, sizeof h.info.cpus, &h.info.cpus) != 0) CPU_ZERO(&h.info.cpus);
  h.info.listen = bound;
  gethostname(h.info.hostname, sizeof h.info.hostname - 1);
  if (Status s = sendAll(root.get(), &h, sizeof h, deadline, abort_); !s)
    return std::move(s).withContext("rendezvous: sending hello to root");
  counted(true, sizeof h);

  wire::Reply r{};
  if (Status s = recvAll(root.get(), &r, sizeof r, deadline, abort_); !s) {
    if (s.code() == StatusCode::Timeout)
      return timeoutError("rank {}: rendezvous at {}: not all {} ranks joined within {} ms", rank_,
                          id.root.toString(), nranks_, timeoutMs_);
    return std::move(s).withContext(fmt::format("rank {}: rendezvous: waiting for root {}", rank_, id.root.toString()));
  }
  counted(false, sizeof r);
  StatusCode code = StatusCode::Ok;
  if (Status s = wire::checkReply(&r, &code); !s)
    return std::move(s).withContext(fmt::format("rendezvous: root {}", id.root.toString()));
  if (code != StatusCode::Ok) return Status(code, fmt::format("rendezvous root: {}", r.message));
  peers_.resize(static_cast<size_t>(nranks_));
  if (rank_ == 0) {
    if (Status s = recvAll(root.get(), peers_.data(), peers_.size() * sizeof(PeerInfo), deadline, abort_); !s)
      return std::move(s).withContext("rendezvous: receiving the peer table");
    counted(false, peers_.size() * sizeof(PeerInfo));
  } else if (Status s = wire::checkListenAddress(r.parent, fmt::format("rank {}'s tree parent's", rank_)); !s) {
    return std::move(s).withContext(fmt::format("rendezvous: root {}", id.root.toString()));
  }
  *parent = r.parent;
  nonce_ = r.nonce;
  root_ = std::move(root);  // the creation watch
  ZCOLL_TRACE(Boot, rank_, "rendezvous done: {} ranks, listening on {}", nranks_, bound.toString());
  return Status::ok();
}

Status Bootstrap::connectTree(const SockAddr& parent) {
  Deadline deadline = Deadline::afterMs(timeoutMs_);
  if (nranks_ > 1) {
    if (tree_.parent >= 0) {
      if (Status s = connectTcp(parent, deadline, abort_, &parent_); !s)
        return std::move(s).withContext(
            fmt::format("bootstrap tree: rank {} connecting to its parent, rank {}", rank_, tree_.parent));
      wire::TreeHello h{};
      stamp(&h, wire::kTreeMagic, secret_);
      h.nonce = nonce_;
      h.rank = rank_;
      if (Status s = send(parent_.get(), &h, sizeof h, deadline, "bootstrap tree: hello", tree_.parent); !s) return s;
    }
    // Accept the children; anything else is dropped, silent connections included (they are read
    // side by side, each with its own short budget).
    children_.resize(tree_.children.size());
    const HelloJudge judge = [&](const void* hello, Fd* fd, const SockAddr&) {
      wire::TreeHello in{};
      std::memcpy(&in, hello, sizeof in);
      if (Status s = wire::checkTreeHello(in, secret_, nonce_, tree_.children); !s)
        return HelloJudgement{HelloVerdict::Drop, s};
      const size_t j = static_cast<size_t>(
          std::find(tree_.children.begin(), tree_.children.end(), in.rank) - tree_.children.begin());
      if (children_[j].valid())
        return HelloJudgement{HelloVerdict::Drop, invalidArgument("rank {} connected twice", in.rank)};
      children_[j] = std::move(*fd);
      counted(false, sizeof in);
      return HelloJudgement{HelloVerdict::Keep, Status::ok()};
    };
    if (Status s = acceptHellos(listen_.get(), sizeof(wire::TreeHello), static_cast<int>(children_.size()), deadline,
                                abort_, judge, fmt::format("bootstrap tree: rank {} waiting for its children", rank_),
                                rank_);
        !s)
      return s;
  }
  listen_.reset();
  // The table, from rank 0 down.
  if (Status s = broadcast(peers_.data(), peers_.size() * sizeof(PeerInfo), deadline); !s)
    return std::move(s).withContext("bootstrap: the peer table");
  for (int i = 0; i < nranks_; ++i)
    if (Status s = wire::checkPeerInfo(peers_[static_cast<size_t>(i)], i); !s)
      return std::move(s).withContext("rendezvous: peer table");
  return Status::ok();
}

Status Bootstrap::broadcast(void* data, size_t bytes, Deadline deadline) {
  if (tree_.parent >= 0)
    if (Status s = recv(parent_.get(), data, bytes, deadline, "bootstrap broadcast", tree_.parent); !s) return s;
  for (size_t j = 0; j < children_.size(); ++j)
    if (Status s = send(children_[j].get(), data, bytes, deadline, "bootstrap broadcast", tree_.children[j]); !s)
      return s;
  return Status::ok();
}

Status Bootstrap::allGather(void* data, size_t bytesPerRank) {
  auto* base = static_cast<char*>(data);
  Deadline deadline = Deadline::afterMs(timeoutMs_);
  // Up: each child's subtree [c, end) in one message, then this subtree to the parent.
  for (size_t j = 0; j < children_.size(); ++j) {
    const int c = tree_.children[j];
    if (Status s = recv(children_[j].get(), base + static_cast<size_t>(c) * bytesPerRank,
                        static_cast<size_t>(tree_.childEnd[j] - c) * bytesPerRank, deadline, "bootstrap allgather", c);
        !s)
      return s;
  }
  if (tree_.parent >= 0)
    if (Status s = send(parent_.get(), base + static_cast<size_t>(rank_) * bytesPerRank,
                        static_cast<size_t>(tree_.end - rank_) * bytesPerRank, deadline, "bootstrap allgather",
                        tree_.parent);
        !s)
      return s;
  // Down: the whole.
  return broadcast(data, static_cast<size_t>(nranks_) * bytesPerRank, deadline);
}

Status Bootstrap::barrier() {
  Deadline deadline = Deadline::afterMs(timeoutMs_);
  uint8_t token = 0;
  for (size_t j = 0; j < children_.size(); ++j)
    if (Status s = recv(children_[j].get(), &token, 1, deadline, "bootstrap barrier", tree_.children[j]); !s) return s;
  if (tree_.parent >= 0)
    if (Status s = send(parent_.get(), &token, 1, deadline, "bootstrap barrier", tree_.parent); !s) return s;
  return broadcast(&token, 1, deadline);
}

}  // namespace zcoll

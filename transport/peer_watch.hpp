// peer_watch.hpp - whether a peer's process on this host has exited: a pidfd per same-host peer (from
// its pid, or handed over by the peer itself) (readable once that process has exited; Linux >= 5.3, else nothing is watched and
// the timeout remains). Used by transports whose wire cannot tell a dead peer quickly (shm, ib).
#pragma once

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/socket.hpp"

namespace zcoll {

class PeerWatch {
 public:
  // Watches every rank of the bootstrap's table on this host (same host hash) in another process.
  void watch(const Bootstrap& boot) {
    const PeerInfo& me = boot.peers()[static_cast<size_t>(boot.rank())];
    for (const PeerInfo& p : boot.peers()) {
      if (p.rank == boot.rank() || p.hostHash != me.hostHash || p.pid == ::getpid()) continue;
      const int fd = static_cast<int>(::syscall(SYS_pidfd_open, p.pid, 0));
      if (fd < 0) continue;
      fds_.emplace_back(fd);
      ranks_.push_back(p.rank);
    }
  }
  // Watches the processes of pidfds[rank] (valid entries), pidfds its peers sent (SCM_RIGHTS): right
  // across PID namespaces, where a peer's pid names another process here.
  void watchPidfds(std::vector<Fd> pidfds) {
    for (size_t r = 0; r < pidfds.size(); ++r) {
      if (!pidfds[r].valid()) continue;
      fds_.push_back(std::move(pidfds[r]));
      ranks_.push_back(static_cast<int>(r));
    }
  }
  // A syscall: for waits that already sleep.
  bool exited(int rank) const {
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (ranks_[i] != rank) continue;
      pollfd p{fds_[i].get(), POLLIN, 0};
      return ::poll(&p, 1, 0) > 0;
    }
    return false;
  }

 private:
  std::vector<Fd> fds_;
  std::vector<int> ranks_;
};

}  // namespace zcoll

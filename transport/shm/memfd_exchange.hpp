// memfd_exchange.hpp - hands a memfd to each same-host peer over abstract Unix sockets.
//
// Abstract socket names ("\0zcoll-<nonce>-<rank>") live in the network namespace, never in the
// filesystem: nothing remains after the processes end, even after kill -9. Each message carries
// the communicator's secret and nonce; a connection without them is logged and dropped.
#pragma once

#include <atomic>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "core/socket.hpp"

namespace zcoll::shm {

// Sends myFd to every rank in `peers` and receives each one's fd into (*fds)[rank].
Status exchangeMemfds(Bootstrap& boot, const std::vector<int>& peers, int myFd, Deadline deadline,
                      const std::atomic<bool>* abort, std::vector<Fd>* fds);

}  // namespace zcoll::shm

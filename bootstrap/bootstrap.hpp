// bootstrap.hpp - how the ranks of a communicator find each other.
//
// 1. Rendezvous: every rank connects to the root (address and port from the unique id) and presents
//    the secret and its PeerInfo; the root answers each with a random per-communicator nonce and the
//    listening address of its parent in the tree (tree.hpp), and rank 0 also with the table of all
//    PeerInfos. The root is a thread of the process that made the id (RendezvousRoot). It sends and
//    receives O(N) bytes in all: the table goes to rank 0 alone.
// 2. Tree: each rank connects to its parent's listening socket and accepts its children's; both
//    present the secret and nonce. Strangers are logged and dropped. The table then goes down the
//    tree (each rank forwards it to at most kBootstrapFanout children).
// 2b. Creation watch: the root connection stays open until the communicator is created; a rank that
//    leaves before that is named by the root to all others, whose creation then aborts at once.
// 3. Out-of-band collectives on that tree: allGather of small blocks (up the tree, each subtree's
//    blocks in one message, then the whole down) and barrier: O(N) messages, O(log N) steps.
//    Used during communicator setup only (transport wiring), never on a data path.
// Every step is bounded by the config timeout and stops when the abort flag is raised.
#pragma once

#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/tree.hpp"
#include "bootstrap/unique_id.hpp"
#include "core/config.hpp"
#include "core/socket.hpp"

namespace zcoll {

// What a rank tells the others about itself. Trivially copyable: sent as bytes between ranks of
// one job, which share an ABI.
struct PeerInfo {
  int32_t rank = -1;
  int32_t pid = 0;
  uint64_t hostHash = 0;  // equal <=> same host, network and IPC namespace (shared memory possible)
  SockAddr listen;        // this rank's bootstrap listening address
  char hostname[64] = {};
  uint8_t device = 0;     // 1: this process has a device runtime (core/device.hpp)
  uint64_t settings = 0;  // sharedSettingsHash of its Config: equal on every rank or creation fails
  // The CPUs this process may run on (sched_getaffinity): the ranks of a host outnumber its cores
  // when they outnumber the union of their sets (the wait policy).
  cpu_set_t cpus{};
};

// What the bootstrap of one communicator cost this rank, and (in the process that served the
// rendezvous) the root: messages and bytes, counted where they are sent and received.
struct BootstrapStats {
  int64_t messagesSent = 0, messagesReceived = 0;
  int64_t bytesSent = 0, bytesReceived = 0;
  int64_t rootBytesSent = 0, rootBytesReceived = 0;  // this process's rendezvous root, if it ran one
};

// This process's host identity: boot id, hostname and the net/ipc namespaces.
uint64_t localHostHash();

class Bootstrap {
 public:
  // `abort` is the communicator's: the creation watch raises it when the root says a rank left.
  static Status create(const UniqueIdFields& id, int rank, int nranks, const Config& config,
                       std::atomic<bool>* abort, std::unique_ptr<Bootstrap>* out);
  ~Bootstrap();

  // Ends the creation watch (started after the rendezvous; bootstrap_wire.hpp): tells the root this
  // rank's communicator is created (created) or closes without a word (the root tells the others).
  // Returns `s`, or the watch's reason when it fired: the rank that left first, named by the root.
  Status endCreation(Status s);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  uint64_t nonce() const { return nonce_; }
  const Secret& secret() const { return secret_; }
  const std::vector<PeerInfo>& peers() const { return peers_; }

  // data holds nranks blocks of bytesPerRank; this rank's block is filled; on return all are.
  Status allGather(void* data, size_t bytesPerRank);
  Status barrier();
  const BootstrapStats& stats() const { return stats_; }

 private:
  Bootstrap() = default;
  Status rendezvous(const UniqueIdFields& id, SockAddr* parent);
  Status connectTree(const SockAddr& parent);
  // Down the tree: rank 0's bytes to every rank.
  Status broadcast(void* data, size_t bytes, Deadline deadline);
  Status send(int fd, const void* data, size_t bytes, Deadline deadline, std::string_view what, int peer);
  void counted(bool sent, size_t bytes);  // stats_ of one message
  Status recv(int fd, void* data, size_t bytes, Deadline deadline, std::string_view what, int peer);
  void watchRoot();  // the watch thread: a Notice or the root's end raises abort_

  int rank_ = 0;
  int nranks_ = 1;
  int64_t timeoutMs_ = 0;
  std::atomic<bool>* abort_ = nullptr;
  Secret secret_{};
  uint64_t nonce_ = 0;
  uint64_t settings_ = 0;  // sharedSettingsHash of this rank's Config
  std::vector<PeerInfo> peers_;
  Fd listen_;
  TreeNode tree_;
  Fd parent_;
  std::vector<Fd> children_;  // in tree_.children's order
  Fd root_;  // until endCreation
  Fd wakeWatch_;  // an eventfd: endCreation wakes the watch at once (its poll has no time slice)
  std::thread watch_;
  std::atomic<bool> stopWatch_{false};
  std::atomic<bool> watchFired_{false};
  std::string watchReason_;  // written by the watch before watchFired_
  std::mutex watchMu_;  // with watchCv_: endCreation waits a moment for a notice on its way
  std::condition_variable watchCv_;
  bool creationEnded_ = false;
  BootstrapStats stats_;
};

// The rendezvous service of one unique id, a thread in the process that created the id. It serves
// exactly one communicator creation, then ends (or ends at its timeout).
class RendezvousRoot {
 public:
  // Listens on `bindAddr` (port 0 = any free port); *bound receives the address to put in the id.
  static Status start(const SockAddr& bindAddr, const Secret& secret, int64_t timeoutMs, SockAddr* bound);
  // Joins the service of this id if this process runs it: it ends once every rank reported its
  // communicator created or left (bounded by the timeout).
  static void join(const SockAddr& root, const Secret& secret);
  // Stops the service of this id if this process runs it (after a failed init) and joins it.
  static void cancel(const SockAddr& root, const Secret& secret);
  // Joins every finished service thread.
  static void reap();
  // Bytes the last service that ended in this process sent and received.
  static void lastStats(int64_t* sent, int64_t* received);
};

}  // namespace zcoll

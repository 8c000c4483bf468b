// bootstrap_test.cpp - the rendezvous refuses strangers and carries on; an unreachable root is a
// timeout, not a hang; launcher environments are joined by zcollCommInitFromEnv.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/bootstrap_wire.hpp"
#include "bootstrap/unique_id.hpp"
#include "core/socket.hpp"
#include "zcoll/zcoll.h"

namespace zcoll {
namespace {

// A fresh unique id and its fields.
void newId(zcollUniqueId* id, UniqueIdFields* f) {
  ASSERT_EQ(zcollGetUniqueId(id), zcollSuccess);
  ASSERT_TRUE(decodeUniqueId(id->internal, f).isOk());
}

zcollConfig_t shortTimeout(int ms) {
  zcollConfig_t c = ZCOLL_CONFIG_INITIALIZER;
  c.timeoutMs = ms;
  return c;
}

TEST(Bootstrap, StrangersAreDroppedAndTheRightRanksCarryOn) {
  zcollUniqueId id;
  UniqueIdFields f;
  ASSERT_NO_FATAL_FAILURE(newId(&id, &f));
  f.secret[0] ^= 1;
  zcollUniqueId forged;
  encodeUniqueId(f, forged.internal);

  zcollConfig_t cfg = shortTimeout(3000);
  zcollComm_t intruder = nullptr;
  EXPECT_NE(zcollCommInitRankConfig(&intruder, 2, forged, 0, &cfg), zcollSuccess);
  EXPECT_EQ(intruder, nullptr);

  // Garbage bytes at the rendezvous port are dropped too.
  {
    int fd = socket(f.root.family(), SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&f.root.storage), f.root.len), 0);
    const char junk[] = "GET / HTTP/1.0\r\n\r\n and a lot more junk than a hello would ever hold ..........";
    ASSERT_GT(send(fd, junk, sizeof junk, MSG_NOSIGNAL), 0);
    // The root drops us once it has read a hello's worth of junk: later sends may fail.
    for (int i = 0; i < 20 && send(fd, junk, sizeof junk, MSG_NOSIGNAL) > 0; ++i) {
    }
    close(fd);
  }

  // A connection that says nothing (it holds nobody up: the root polls every connection), one that
  // sends half a hello and closes, and one of random bytes.
  auto connectRoot = [&] {
    int fd = socket(f.root.family(), SOCK_STREAM, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&f.root.storage), f.root.len), 0);
    return fd;
  };
  const int silent = connectRoot();
  {
    int fd = connectRoot();
    const char half[40] = {'L', 'H', 'B', 'z', 1};
    EXPECT_GT(send(fd, half, sizeof half, MSG_NOSIGNAL), 0);
    close(fd);
  }
  {
    int fd = connectRoot();
    Secret noise;
    for (int i = 0; i < 64; ++i) {
      ASSERT_TRUE(randomSecret(&noise).isOk());
      if (send(fd, noise.data(), noise.size(), MSG_NOSIGNAL) <= 0) break;
    }
    close(fd);
  }

  zcollComm_t comms[2] = {};
  std::thread other([&] { EXPECT_EQ(zcollCommInitRankConfig(&comms[1], 2, id, 1, &cfg), zcollSuccess); });
  EXPECT_EQ(zcollCommInitRankConfig(&comms[0], 2, id, 0, &cfg), zcollSuccess) << zcollGetLastError(nullptr);
  other.join();
  close(silent);
  for (zcollComm_t c : comms) {
    if (c) {
      EXPECT_EQ(zcollCommDestroy(c), zcollSuccess);
    }
  }
}

// Ports this process listens on (TCP, IPv4), from /proc/self/net/tcp and the sockets of /proc/self/fd.
std::vector<int> listeningPorts() {
  std::set<std::string> inodes;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char link[64] = {};
      if (readlink(("/proc/self/fd/" + std::string(e->d_name)).c_str(), link, sizeof link - 1) > 0 &&
          std::strncmp(link, "socket:[", 8) == 0)
        inodes.insert(std::string(link + 8, std::strlen(link) - 9));
    }
    closedir(d);
  }
  std::vector<int> ports;
  std::ifstream tcp("/proc/self/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
    in >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
    if (st == "0A" && inodes.count(inode)) ports.push_back(static_cast<int>(std::stoul(local.substr(local.find(':') + 1), nullptr, 16)));
  }
  return ports;
}

// Silent connections to the ranks' own listeners (the bootstrap ring's, then tcp's) hold nobody up:
// each listener reads all its connections side by side (issue 26: 4 per rank cost 20 s, 12 made
// creation time out). Ranks 0 and 1 listen while they wait for rank 2; then 12 silent connections
// go to each of their listeners, and rank 2 joins.
TEST(Bootstrap, SilentConnectionsToTheRanksListenersHoldNobodyUp) {
  zcollUniqueId id;
  UniqueIdFields f;
  ASSERT_NO_FATAL_FAILURE(newId(&id, &f));
  zcollConfig_t cfg = shortTimeout(30000);
  cfg.transports = "tcp";
  const std::vector<int> before = listeningPorts();
  zcollComm_t comms[3] = {};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] { EXPECT_EQ(zcollCommInitRankConfig(&comms[r], 3, id, r, &cfg), zcollSuccess) << zcollGetLastError(nullptr); });
  std::vector<int> silent;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::vector<int> now = listeningPorts();
    std::vector<int> fresh;
    for (int p : now)
      if (p != f.root.port() && std::find(before.begin(), before.end(), p) == before.end()) fresh.push_back(p);
    if (fresh.size() < 2) continue;
    for (int port : fresh)
      for (int k = 0; k < 12; ++k) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        silent.push_back(fd);
      }
    break;
  }
  ASSERT_EQ(silent.size(), 24u) << "the ring listeners of ranks 0 and 1 were not found";
  const auto start = std::chrono::steady_clock::now();
  ranks.emplace_back([&] { EXPECT_EQ(zcollCommInitRankConfig(&comms[2], 3, id, 2, &cfg), zcollSuccess) << zcollGetLastError(nullptr); });
  for (auto& t : ranks) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 3.0) << "creation took " << s << " s with silent connections at the listeners";
  for (int fd : silent) close(fd);
  for (zcollComm_t c : comms)
    if (c) {
      EXPECT_EQ(zcollCommDestroy(c), zcollSuccess);
    }
}

// A rank that joins the rendezvous and dies (its connection to the root closes, as the kernel closes it
// when a process dies) fails the others within a second, naming it, instead of leaving them waiting
// for it at the ring until the timeout. Rank 2 here is the test itself, speaking the rendezvous.
TEST(Bootstrap, ARankThatDiesDuringCreationFailsTheOthersAtOnce) {
  zcollUniqueId id;
  UniqueIdFields f;
  ASSERT_NO_FATAL_FAILURE(newId(&id, &f));
  zcollConfig_t cfg = shortTimeout(30000);
  zcollComm_t comms[2] = {};
  std::string errors[2];
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      EXPECT_EQ(zcollCommInitRankConfig(&comms[r], 3, id, r, &cfg), zcollRemoteError);
      errors[r] = zcollGetLastError(nullptr);
    });
  {
    Fd root;
    ASSERT_TRUE(connectTcp(f.root, Deadline::afterMs(5000), nullptr, &root).isOk());
    wire::Hello h{};
    h.magic = wire::kHelloMagic;
    h.version = wire::kVersion;
    std::memcpy(h.secret, f.secret.data(), sizeof h.secret);
    h.rank = 2;
    h.nranks = 3;
    h.info.rank = 2;
    h.info.pid = 4242;
    h.info.hostHash = localHostHash();
    ASSERT_TRUE(resolveAddress("127.0.0.1", 9, &h.info.listen).isOk());  // nobody listens there
    std::snprintf(h.info.hostname, sizeof h.info.hostname, "%s", "doomed-host");
    ASSERT_TRUE(sendAll(root.get(), &h, sizeof h, Deadline::afterMs(5000), nullptr).isOk());
    wire::Reply reply{};
    ASSERT_TRUE(recvAll(root.get(), &reply, sizeof reply, Deadline::afterMs(10000), nullptr).isOk());
  }  // "dies": the connection closes
  for (auto& t : ranks) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 3.0);
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 2 (pid 4242 on host doomed-host) left before the communicator was created"),
              std::string::npos)
        << e;
  for (zcollComm_t c : comms) EXPECT_EQ(c, nullptr);
}

TEST(Bootstrap, UnreachableRootTimesOut) {
  UniqueIdFields f;
  ASSERT_TRUE(resolveAddress("127.0.0.1", 1, &f.root).isOk());  // nothing listens on port 1
  ASSERT_TRUE(randomSecret(&f.secret).isOk());
  zcollUniqueId id;
  encodeUniqueId(f, id.internal);
  zcollConfig_t cfg = shortTimeout(500);
  zcollComm_t comm = nullptr;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(zcollCommInitRankConfig(&comm, 2, id, 1, &cfg), zcollTimeout);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(ms, 450);
  EXPECT_LT(ms, 2500);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("127.0.0.1:1"), std::string::npos)
      << zcollGetLastError(nullptr);
}

TEST(Bootstrap, MissingRanksTimeOut) {
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  zcollConfig_t cfg = shortTimeout(400);
  zcollComm_t comm = nullptr;
  EXPECT_EQ(zcollCommInitRankConfig(&comm, 3, id, 0, &cfg), zcollTimeout);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("3 ranks"), std::string::npos) << zcollGetLastError(nullptr);
}

TEST(Bootstrap, InitFromTorchrunEnvironment) {
  // A port picked by the kernel, then released for rank 0 to bind.
  int port = 0;
  {
    SockAddr a, bound;
    ASSERT_TRUE(resolveAddress("127.0.0.1", 0, &a).isOk());
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&a.storage), a.len), 0);
    bound.len = sizeof bound.storage;
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound.storage), &bound.len);
    port = bound.port();
    close(fd);
  }
  // Both ranks are threads of this process, so the environment is shared: init rank 1 through the
  // explicit API with the same derived id is not possible; run two env inits in sequence instead.
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("RANK", "0", 1);
  zcollComm_t comm = nullptr;
  ASSERT_EQ(zcollCommInitFromEnv(&comm, nullptr), zcollSuccess) << zcollGetLastError(nullptr);
  int n = 0;
  EXPECT_EQ(zcollCommCount(comm, &n), zcollSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(zcollCommDestroy(comm), zcollSuccess);
  unsetenv("WORLD_SIZE");
  EXPECT_EQ(zcollCommInitFromEnv(&comm, nullptr), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("WORLD_SIZE"), std::string::npos)
      << zcollGetLastError(nullptr);
  for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK"}) unsetenv(v);
}

}  // namespace
}  // namespace zcoll

// Ranks created with settings that decide the wire or the algorithm (here the chunk size) fail at
// creation, each naming the settings, instead of meeting mismatched chunks or a hang later; and
// leave nothing behind (a second pair with equal settings works).
TEST(Bootstrap, MismatchedSettingsFailCreation) {
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  zcollConfig_t a = ZCOLL_CONFIG_INITIALIZER, b = ZCOLL_CONFIG_INITIALIZER;
  a.timeoutMs = b.timeoutMs = 20000;
  b.chunkBytes = 64 * 1024;
  zcollComm_t comms[2] = {};
  zcollResult_t results[2] = {zcollSuccess, zcollSuccess};
  std::string messages[2];
  std::thread other([&] {
    results[1] = zcollCommInitRankConfig(&comms[1], 2, id, 1, &b);
    messages[1] = zcollGetLastError(nullptr);
  });
  results[0] = zcollCommInitRankConfig(&comms[0], 2, id, 0, &a);
  messages[0] = zcollGetLastError(nullptr);
  other.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r], zcollInvalidUsage) << messages[r];
    EXPECT_NE(messages[r].find("must be equal on all ranks"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("ZCOLL_CHUNK_SIZE"), std::string::npos) << messages[r];
    EXPECT_EQ(comms[r], nullptr);
  }
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  std::thread again([&] { EXPECT_EQ(zcollCommInitRankConfig(&comms[1], 2, id, 1, &b), zcollSuccess); });
  EXPECT_EQ(zcollCommInitRankConfig(&comms[0], 2, id, 0, &b), zcollSuccess) << zcollGetLastError(nullptr);
  again.join();
  for (zcollComm_t c : comms) {
    if (c) {
      EXPECT_EQ(zcollCommDestroy(c), zcollSuccess);
    }
  }
}

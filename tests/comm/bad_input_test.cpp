// bad_input_test.cpp - every public entry point rejects each class of invalid argument with the
// documented code and a message naming the argument; nothing crashes, and the communicator stays
// usable afterwards.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "zcoll/zcoll.h"

namespace {

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    zcollUniqueId id;
    ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
    ASSERT_EQ(zcollCommInitRank(&comm_, 1, id, 0), zcollSuccess) << zcollGetLastError(nullptr);
  }
  void TearDown() override {
    // Still usable after all the rejected calls.
    float x = 1, y = 0;
    EXPECT_EQ(zcollAllReduce(&x, &y, 1, zcollFloat, zcollSum, comm_, nullptr), zcollSuccess);
    EXPECT_EQ(y, 1.0f);
    EXPECT_EQ(zcollCommDestroy(comm_), zcollSuccess);
  }

  // Checks the code and that the last error names `arg`.
  void expectRejected(zcollResult_t got, zcollResult_t want, const std::string& arg, const char* what) {
    EXPECT_EQ(got, want) << what << ": " << zcollGetLastError(comm_);
    std::string msg = zcollGetLastError(comm_);
    EXPECT_NE(msg.find(arg), std::string::npos) << what << ": message '" << msg << "' does not name '" << arg << "'";
  }

  zcollComm_t comm_ = nullptr;
  float buf_[16] = {};
  float out_[16] = {};
};

const auto kBadType = static_cast<zcollDataType_t>(42);
const auto kBadOp = static_cast<zcollRedOp_t>(-1);

TEST_F(BadInput, NullBuffersWithCount) {
  expectRejected(zcollAllReduce(nullptr, out_, 4, zcollFloat, zcollSum, comm_, nullptr), zcollInvalidArgument,
                 "sendbuff", "allreduce");
  expectRejected(zcollAllReduce(buf_, nullptr, 4, zcollFloat, zcollSum, comm_, nullptr), zcollInvalidArgument,
                 "recvbuff", "allreduce");
  expectRejected(zcollAllGather(nullptr, out_, 4, zcollFloat, comm_, nullptr), zcollInvalidArgument, "sendbuff",
                 "allgather");
  expectRejected(zcollReduceScatter(buf_, nullptr, 4, zcollFloat, zcollSum, comm_, nullptr), zcollInvalidArgument,
                 "recvbuff", "reducescatter");
  expectRejected(zcollBroadcast(nullptr, out_, 4, zcollFloat, 0, comm_, nullptr), zcollInvalidArgument, "sendbuff",
                 "broadcast at root");
  expectRejected(zcollReduce(buf_, nullptr, 4, zcollFloat, zcollSum, 0, comm_, nullptr), zcollInvalidArgument,
                 "recvbuff", "reduce at root");
  expectRejected(zcollSend(nullptr, 4, zcollFloat, 0, comm_, nullptr), zcollInvalidArgument, "sendbuff", "send");
  expectRejected(zcollRecv(nullptr, 4, zcollFloat, 0, comm_, nullptr), zcollInvalidArgument, "recvbuff", "recv");
  // count 0 with NULL buffers is fine
  EXPECT_EQ(zcollAllReduce(nullptr, nullptr, 0, zcollFloat, zcollSum, comm_, nullptr), zcollSuccess);
}

TEST_F(BadInput, InvalidTypeOpRootPeer) {
  expectRejected(zcollAllReduce(buf_, out_, 4, kBadType, zcollSum, comm_, nullptr), zcollInvalidArgument, "datatype",
                 "allreduce type");
  expectRejected(zcollAllReduce(buf_, out_, 4, zcollFloat, kBadOp, comm_, nullptr), zcollInvalidArgument, "op",
                 "allreduce op");
  expectRejected(zcollAllGather(buf_, out_, 4, kBadType, comm_, nullptr), zcollInvalidArgument, "datatype",
                 "allgather type");
  expectRejected(zcollReduceScatter(buf_, out_, 4, zcollFloat, kBadOp, comm_, nullptr), zcollInvalidArgument, "op",
                 "reducescatter op");
  expectRejected(zcollBroadcast(buf_, out_, 4, zcollFloat, 1, comm_, nullptr), zcollInvalidArgument, "root",
                 "broadcast root");
  expectRejected(zcollReduce(buf_, out_, 4, zcollFloat, zcollSum, -1, comm_, nullptr), zcollInvalidArgument, "root",
                 "reduce root");
  expectRejected(zcollReduce(buf_, out_, 4, kBadType, zcollSum, 0, comm_, nullptr), zcollInvalidArgument, "datatype",
                 "reduce type");
  expectRejected(zcollSend(buf_, 4, zcollFloat, 1, comm_, nullptr), zcollInvalidArgument, "peer", "send peer");
  expectRejected(zcollRecv(out_, 4, zcollFloat, -3, comm_, nullptr), zcollInvalidArgument, "peer", "recv peer");
  expectRejected(zcollSend(buf_, 4, kBadType, 0, comm_, nullptr), zcollInvalidArgument, "datatype", "send type");
  expectRejected(zcollGather(buf_, out_, 4, zcollFloat, 3, comm_, nullptr), zcollInvalidArgument, "root",
                 "gather root");
  expectRejected(zcollScatter(buf_, out_, 4, kBadType, 0, comm_, nullptr), zcollInvalidArgument, "datatype",
                 "scatter type");
  expectRejected(zcollAlltoAll(buf_, out_, 4, kBadType, comm_, nullptr), zcollInvalidArgument, "datatype",
                 "alltoall type");
  expectRejected(zcollGather(nullptr, out_, 4, zcollFloat, 0, comm_, nullptr), zcollInvalidArgument, "sendbuff",
                 "gather null");
  expectRejected(zcollScatter(buf_, nullptr, 4, zcollFloat, 0, comm_, nullptr), zcollInvalidArgument, "recvbuff",
                 "scatter null");
  expectRejected(zcollAlltoAll(buf_, buf_, 4, zcollFloat, comm_, nullptr), zcollInvalidArgument, "overlap",
                 "alltoall in place");
  expectRejected(zcollAlltoAll(buf_, out_, SIZE_MAX / 2, zcollFloat, comm_, nullptr), zcollInvalidArgument, "count",
                 "alltoall overflow");
  int fakeStream = 0;
  expectRejected(zcollBarrier(comm_, &fakeStream), zcollInvalidArgument, "stream", "barrier stream");
  expectRejected(zcollBarrier(nullptr, nullptr), zcollInvalidArgument, "comm", "barrier comm");
}

TEST_F(BadInput, CountOverflowAndOverlap) {
  expectRejected(zcollAllReduce(buf_, out_, SIZE_MAX / 2, zcollFloat, zcollSum, comm_, nullptr),
                 zcollInvalidArgument, "count", "allreduce overflow");
  expectRejected(zcollAllGather(buf_, out_, SIZE_MAX / 4 + 1, zcollDouble, comm_, nullptr), zcollInvalidArgument,
                 "sendcount", "allgather overflow");
  expectRejected(zcollReduceScatter(buf_, out_, SIZE_MAX, zcollInt8, zcollSum, comm_, nullptr), zcollInvalidArgument,
                 "recvcount", "reducescatter overflow");
  expectRejected(zcollAllReduce(buf_, buf_ + 1, 8, zcollFloat, zcollSum, comm_, nullptr), zcollInvalidArgument,
                 "overlap", "partial overlap");
}

TEST_F(BadInput, StreamAndRequests) {
  int fakeStream = 0;
  expectRejected(zcollAllReduce(buf_, out_, 4, zcollFloat, zcollSum, comm_, &fakeStream), zcollInvalidArgument,
                 "stream", "non-null stream");
  expectRejected(zcollAllReduceAsync(buf_, out_, 4, zcollFloat, zcollSum, comm_, nullptr), zcollInvalidArgument,
                 "request", "null request");
  expectRejected(zcollWait(nullptr), zcollInvalidArgument, "request", "wait null");
  int done = 0;
  expectRejected(zcollTest(nullptr, &done), zcollInvalidArgument, "request", "test null");
  ASSERT_EQ(zcollGroupStart(), zcollSuccess);
  zcollRequest_t req = nullptr;
  expectRejected(zcollAllReduceAsync(buf_, out_, 4, zcollFloat, zcollSum, comm_, &req), zcollInvalidUsage, "group",
                 "async in group");
  ASSERT_EQ(zcollGroupEnd(), zcollSuccess);
  expectRejected(zcollGroupEnd(), zcollInvalidUsage, "zcollGroupStart", "unmatched group end");
}

TEST_F(BadInput, QueriesAndNullOutputs) {
  expectRejected(zcollCommCount(comm_, nullptr), zcollInvalidArgument, "count", "count null");
  expectRejected(zcollCommUserRank(comm_, nullptr), zcollInvalidArgument, "rank", "rank null");
  expectRejected(zcollCommGetAsyncError(comm_, nullptr), zcollInvalidArgument, "asyncError", "async null");
  expectRejected(zcollGetVersion(nullptr), zcollInvalidArgument, "version", "version null");
  expectRejected(zcollGetUniqueId(nullptr), zcollInvalidArgument, "uniqueId", "id null");
  int n = 0;
  expectRejected(zcollCommCount(nullptr, &n), zcollInvalidArgument, "comm", "null comm");
  EXPECT_STRNE(zcollGetErrorString(static_cast<zcollResult_t>(99)), nullptr);
}

TEST(BadInputInit, InitArguments) {
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  zcollComm_t comm = nullptr;
  EXPECT_EQ(zcollCommInitRank(nullptr, 1, id, 0), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("comm"), std::string::npos);
  EXPECT_EQ(zcollCommInitRank(&comm, 0, id, 0), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("nranks"), std::string::npos);
  EXPECT_EQ(zcollCommInitRank(&comm, 2, id, 2), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("rank"), std::string::npos);
  zcollUniqueId garbage;
  std::memset(&garbage, 0x5a, sizeof garbage);
  EXPECT_EQ(zcollCommInitRank(&comm, 1, garbage, 0), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("commId"), std::string::npos);
  zcollConfig_t cfg = ZCOLL_CONFIG_INITIALIZER;
  cfg.size = 3;
  EXPECT_EQ(zcollCommInitRankConfig(&comm, 1, id, 0, &cfg), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("config"), std::string::npos);
  cfg = ZCOLL_CONFIG_INITIALIZER;
  cfg.algo = "no-such-algorithm";
  EXPECT_EQ(zcollCommInitRankConfig(&comm, 1, id, 0, &cfg), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("ZCOLL_ALGO"), std::string::npos);
  EXPECT_EQ(comm, nullptr);  // outputs only on success
  // The id is still good after those failures.
  cfg = ZCOLL_CONFIG_INITIALIZER;
  ASSERT_EQ(zcollCommInitRankConfig(&comm, 1, id, 0, &cfg), zcollSuccess) << zcollGetLastError(nullptr);
  EXPECT_EQ(zcollCommDestroy(comm), zcollSuccess);
}

TEST_F(BadInput, Introspection) {
  char buf[256];
  ASSERT_EQ(zcollGetAlgorithmNames("allreduce", buf, sizeof buf), zcollSuccess);
  EXPECT_NE(std::string(buf).find("ring"), std::string::npos) << buf;
  EXPECT_NE(std::string(buf).find("rhd"), std::string::npos) << buf;
  expectRejected(zcollGetAlgorithmNames("allsorts", buf, sizeof buf), zcollInvalidArgument, "collective", "names");
  expectRejected(zcollGetAlgorithmNames("allreduce", buf, 2), zcollInvalidArgument, "len", "short buffer");
  ASSERT_EQ(zcollCommAlgorithmFor(comm_, "broadcast", 100, zcollFloat, buf, sizeof buf), zcollSuccess);
  EXPECT_GT(std::strlen(buf), 0u);
  expectRejected(zcollCommAlgorithmFor(comm_, "allreduce", 100, kBadType, buf, sizeof buf), zcollInvalidArgument,
                 "datatype", "algorithmFor type");
  expectRejected(zcollCommAlgorithmFor(comm_, nullptr, 100, zcollFloat, buf, sizeof buf), zcollInvalidArgument,
                 "collective", "algorithmFor null");
  // The last algorithm: what the prediction named, once an op of that kind ran; arguments by name.
  float x[4] = {1, 2, 3, 4};
  ASSERT_EQ(zcollBroadcast(x, x, 4, zcollFloat, 0, comm_, nullptr), zcollSuccess);
  ASSERT_EQ(zcollCommAlgorithmFor(comm_, "broadcast", 4, zcollFloat, buf, sizeof buf), zcollSuccess);
  char last[64];
  ASSERT_EQ(zcollCommLastAlgorithm(comm_, last, sizeof last), zcollSuccess);
  EXPECT_STREQ(last, buf);
  expectRejected(zcollCommLastAlgorithm(comm_, nullptr, 64), zcollInvalidArgument, "name", "lastAlgorithm null");
  expectRejected(zcollCommLastAlgorithm(comm_, last, 1), zcollInvalidArgument, "len", "lastAlgorithm short");
  expectRejected(zcollCommLastAlgorithm(nullptr, last, sizeof last), zcollInvalidArgument, "comm", "lastAlgorithm comm");
}

// Before any operation the last algorithm is "".
TEST(BadInputInit, LastAlgorithmBeforeAnyOperation) {
  zcollUniqueId id;
  zcollComm_t comm = nullptr;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  ASSERT_EQ(zcollCommInitRank(&comm, 1, id, 0), zcollSuccess);
  char last[64] = "x";
  ASSERT_EQ(zcollCommLastAlgorithm(comm, last, sizeof last), zcollSuccess);
  EXPECT_STREQ(last, "");
  EXPECT_EQ(zcollCommDestroy(comm), zcollSuccess);
}

// Also when creation ran the calibration probe (no cache): the probe's operations are not the user's.
TEST(BadInputInit, LastAlgorithmIsEmptyAfterTheCalibrationProbe) {
  setenv("ZCOLL_CALIBRATE", "1", 1);
  setenv("ZCOLL_CALIBRATION_DIR", "none", 1);
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([id, r] {
      zcollComm_t comm = nullptr;
      ASSERT_EQ(zcollCommInitRank(&comm, 2, id, r), zcollSuccess) << zcollGetLastError(nullptr);
      char last[64] = "x";
      EXPECT_EQ(zcollCommLastAlgorithm(comm, last, sizeof last), zcollSuccess);
      EXPECT_STREQ(last, "") << "rank " << r;
      EXPECT_EQ(zcollCommDestroy(comm), zcollSuccess);
    });
  for (auto& t : ranks) t.join();
  setenv("ZCOLL_CALIBRATE", "0", 1);
  unsetenv("ZCOLL_CALIBRATION_DIR");
}

// The handle of a 1-rank communicator that was created and destroyed (nullptr on failure).
zcollComm_t destroyedComm() {
  zcollUniqueId id;
  zcollComm_t comm = nullptr;
  if (zcollGetUniqueId(&id) != zcollSuccess || zcollCommInitRank(&comm, 1, id, 0) != zcollSuccess ||
      zcollCommDestroy(comm) != zcollSuccess)
    return nullptr;
  return comm;
}

// The arguments of one data-moving call; each invalid class below changes one of them.
struct CallArgs {
  zcollComm_t comm;
  const void* send;
  void* recv;
  size_t count;
  zcollDataType_t type;
  zcollRedOp_t op;
  int root;  // root or peer
  zcollStream_t stream;
};

struct EntryPoint {
  const char* name;
  std::function<zcollResult_t(const CallArgs&)> call;
  bool hasOp, hasRoot, hasStream;
  const char* rootArg;  // "root" or "peer"
  const char* bufArg;   // the buffer argument a NULL is reported as
};

std::vector<EntryPoint> entryPoints() {
  static zcollRequest_t req = nullptr;
  auto async = [](zcollResult_t r) {  // a request that did get queued must be completed
    if (r == zcollSuccess) (void)zcollWait(req);
    return r;
  };
  return {
      {"zcollAllReduce", [](const CallArgs& a) { return zcollAllReduce(a.send, a.recv, a.count, a.type, a.op, a.comm, a.stream); },
       true, false, true, "", "sendbuff"},
      {"zcollAllGather", [](const CallArgs& a) { return zcollAllGather(a.send, a.recv, a.count, a.type, a.comm, a.stream); },
       false, false, true, "", "sendbuff"},
      {"zcollReduceScatter",
       [](const CallArgs& a) { return zcollReduceScatter(a.send, a.recv, a.count, a.type, a.op, a.comm, a.stream); }, true,
       false, true, "", "sendbuff"},
      {"zcollBroadcast",
       [](const CallArgs& a) { return zcollBroadcast(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream); }, false,
       true, true, "root", "sendbuff"},
      {"zcollReduce",
       [](const CallArgs& a) { return zcollReduce(a.send, a.recv, a.count, a.type, a.op, a.root, a.comm, a.stream); }, true,
       true, true, "root", "sendbuff"},
      {"zcollGather", [](const CallArgs& a) { return zcollGather(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream); },
       false, true, true, "root", "sendbuff"},
      {"zcollScatter",
       [](const CallArgs& a) { return zcollScatter(a.send, a.recv, a.count, a.type, a.root, a.comm, a.stream); }, false, true,
       true, "root", "sendbuff"},
      {"zcollAlltoAll", [](const CallArgs& a) { return zcollAlltoAll(a.send, a.recv, a.count, a.type, a.comm, a.stream); },
       false, false, true, "", "sendbuff"},
      {"zcollSend", [](const CallArgs& a) { return zcollSend(a.send, a.count, a.type, a.root, a.comm, a.stream); }, false,
       true, true, "peer", "sendbuff"},
      {"zcollRecv", [](const CallArgs& a) { return zcollRecv(a.recv, a.count, a.type, a.root, a.comm, a.stream); }, false,
       true, true, "peer", "recvbuff"},
      {"zcollAllReduceAsync",
       [=](const CallArgs& a) { return async(zcollAllReduceAsync(a.send, a.recv, a.count, a.type, a.op, a.comm, &req)); },
       true, false, false, "", "sendbuff"},
      {"zcollAllGatherAsync",
       [=](const CallArgs& a) { return async(zcollAllGatherAsync(a.send, a.recv, a.count, a.type, a.comm, &req)); }, false,
       false, false, "", "sendbuff"},
      {"zcollReduceScatterAsync",
       [=](const CallArgs& a) {
         return async(zcollReduceScatterAsync(a.send, a.recv, a.count, a.type, a.op, a.comm, &req));
       },
       true, false, false, "", "sendbuff"},
      {"zcollBroadcastAsync",
       [=](const CallArgs& a) { return async(zcollBroadcastAsync(a.send, a.recv, a.count, a.type, a.root, a.comm, &req)); },
       false, true, false, "root", "sendbuff"},
      {"zcollReduceAsync",
       [=](const CallArgs& a) {
         return async(zcollReduceAsync(a.send, a.recv, a.count, a.type, a.op, a.root, a.comm, &req));
       },
       true, true, false, "root", "sendbuff"},
  };
}

// Every data-moving entry point, with each class of invalid argument: the documented code, a
// message naming the argument, and the call still works with valid arguments afterwards.
TEST_F(BadInput, EveryEntryPointRejectsEveryInvalidClass) {
  const zcollComm_t dead = destroyedComm();
  ASSERT_NE(dead, nullptr);
  int fakeStream = 0;
  const CallArgs good{comm_, buf_, out_, 4, zcollFloat, zcollSum, 0, nullptr};
  int checked = 0;
  for (const EntryPoint& e : entryPoints()) {
    auto reject = [&](CallArgs a, zcollResult_t want, const char* arg, const char* what) {
      expectRejected(e.call(a), want, arg, (std::string(e.name) + ": " + what).c_str());
      ++checked;
    };
    CallArgs a = good;
    a.comm = nullptr;
    reject(a, zcollInvalidArgument, "comm", "NULL communicator");
    a.comm = dead;
    reject(a, zcollInvalidUsage, "not a live communicator", "destroyed communicator");
    a = good;
    a.send = nullptr;
    a.recv = nullptr;
    reject(a, zcollInvalidArgument, e.bufArg, "NULL buffers");
    a = good;
    a.type = static_cast<zcollDataType_t>(zcollNumTypes);
    reject(a, zcollInvalidArgument, "datatype", "datatype out of range");
    a.type = static_cast<zcollDataType_t>(-1);
    reject(a, zcollInvalidArgument, "datatype", "negative datatype");
    a = good;
    a.count = SIZE_MAX / 2;
    reject(a, zcollInvalidArgument, "count", "count overflow");
    if (e.hasOp) {
      a = good;
      a.op = static_cast<zcollRedOp_t>(zcollNumOps);
      reject(a, zcollInvalidArgument, "op", "op out of range");
    }
    if (e.hasRoot) {
      a = good;
      a.root = 1;
      reject(a, zcollInvalidArgument, e.rootArg, "root/peer = nranks");
      a.root = -1;
      reject(a, zcollInvalidArgument, e.rootArg, "negative root/peer");
    }
    if (e.hasStream) {
      a = good;
      a.stream = &fakeStream;
      reject(a, zcollInvalidArgument, "stream", "non-null stream without CUDA");
    }
    // Send/recv to self must be paired in a group; everything else works as is.
    if (std::string(e.name) != "zcollSend" && std::string(e.name) != "zcollRecv") {
      EXPECT_EQ(e.call(good), zcollSuccess) << e.name << ": " << zcollGetLastError(comm_);
    }
  }
  EXPECT_GE(checked, 15 * 7);
}

TEST(BadInputInit, InitFromEnvArguments) {
  EXPECT_EQ(zcollCommInitFromEnv(nullptr, nullptr), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("comm"), std::string::npos) << zcollGetLastError(nullptr);
  // No launcher variables at all.
  for (const char* v : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                        "SLURM_PROCID", "SLURM_NTASKS", "ZCOLL_COMM_ID", "MASTER_ADDR", "MASTER_PORT"})
    unsetenv(v);
  zcollComm_t comm = nullptr;
  EXPECT_EQ(zcollCommInitFromEnv(&comm, nullptr), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("RANK"), std::string::npos) << zcollGetLastError(nullptr);
  // A rank outside the world, and a malformed secret.
  setenv("RANK", "4", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29511", 1);
  EXPECT_EQ(zcollCommInitFromEnv(&comm, nullptr), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("RANK"), std::string::npos) << zcollGetLastError(nullptr);
  setenv("RANK", "0", 1);
  setenv("ZCOLL_BOOTSTRAP_SECRET", "not-hex", 1);
  EXPECT_EQ(zcollCommInitFromEnv(&comm, nullptr), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("ZCOLL_BOOTSTRAP_SECRET"), std::string::npos)
      << zcollGetLastError(nullptr);
  zcollConfig_t cfg = ZCOLL_CONFIG_INITIALIZER;
  cfg.timeoutMs = -5;
  unsetenv("ZCOLL_BOOTSTRAP_SECRET");
  EXPECT_EQ(zcollCommInitFromEnv(&comm, &cfg), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("timeoutMs"), std::string::npos) << zcollGetLastError(nullptr);
  EXPECT_EQ(comm, nullptr);
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}

TEST(BadInputInit, DestroyedCommunicator) {
  const zcollComm_t comm = destroyedComm();
  ASSERT_NE(comm, nullptr);
  float x = 0;
  EXPECT_EQ(zcollAllReduce(&x, &x, 1, zcollFloat, zcollSum, comm, nullptr), zcollInvalidUsage);
  EXPECT_NE(std::string(zcollGetLastError(comm)).find("not a live communicator"), std::string::npos);
  EXPECT_EQ(zcollCommDestroy(comm), zcollInvalidUsage);
  EXPECT_EQ(zcollCommAbort(comm), zcollInvalidUsage);
  int n = 0;
  EXPECT_EQ(zcollCommCount(comm, &n), zcollInvalidUsage);
}

// A handle that calls have validated (the fast path remembers it) is refused once destroyed, also
// after new communicators were created, from this thread and another; the new ones work.
TEST(BadInputInit, DestroyedHandleStaysDeadAfterNewInits) {
  zcollUniqueId id;
  zcollComm_t a = nullptr;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  ASSERT_EQ(zcollCommInitRank(&a, 1, id, 0), zcollSuccess);
  float x = 1;
  for (int i = 0; i < 3; ++i) ASSERT_EQ(zcollAllReduce(&x, &x, 1, zcollFloat, zcollSum, a, nullptr), zcollSuccess);
  std::thread([&] { EXPECT_EQ(zcollAllReduce(&x, &x, 1, zcollFloat, zcollSum, a, nullptr), zcollSuccess); }).join();
  ASSERT_EQ(zcollCommDestroy(a), zcollSuccess);
  std::vector<zcollComm_t> fresh(3, nullptr);
  for (zcollComm_t& c : fresh) {
    ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
    ASSERT_EQ(zcollCommInitRank(&c, 1, id, 0), zcollSuccess);
    EXPECT_NE(c, a);
  }
  EXPECT_EQ(zcollAllReduce(&x, &x, 1, zcollFloat, zcollSum, a, nullptr), zcollInvalidUsage);
  std::thread([&] { EXPECT_EQ(zcollBroadcast(&x, &x, 1, zcollFloat, 0, a, nullptr), zcollInvalidUsage); }).join();
  for (zcollComm_t c : fresh) {
    EXPECT_EQ(zcollAllReduce(&x, &x, 1, zcollFloat, zcollSum, c, nullptr), zcollSuccess);
    EXPECT_EQ(zcollCommDestroy(c), zcollSuccess);
  }
}

// Destroy while another thread keeps calling on the communicator: its calls end with success or
// InvalidUsage ("not a live communicator"), never a crash; destroy waits for the call inside.
TEST(BadInputInit, DestroyWhileAnotherThreadCalls) {
  for (int round = 0; round < 20; ++round) {
    zcollUniqueId id;
    zcollComm_t comm = nullptr;
    ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
    ASSERT_EQ(zcollCommInitRank(&comm, 1, id, 0), zcollSuccess);
    std::atomic<bool> started{false};
    std::atomic<int> ok{0}, refused{0}, other{0};
    std::thread caller([&] {
      float v = 1;
      for (int i = 0; i < 100000; ++i) {
        const zcollResult_t r = zcollAllReduce(&v, &v, 1, zcollFloat, zcollSum, comm, nullptr);
        started.store(true);
        if (r == zcollSuccess) {
          ++ok;
        } else if (r == zcollInvalidUsage) {
          ++refused;
          break;
        } else {
          ++other;
          break;
        }
      }
    });
    while (!started.load()) std::this_thread::yield();
    EXPECT_EQ(zcollCommDestroy(comm), zcollSuccess);
    caller.join();
    EXPECT_GT(ok.load(), 0);
    EXPECT_EQ(other.load(), 0);
  }
}

}  // namespace

// zcollMemAlloc / zcollMemFree: bad arguments are rejected by name; memory of zcollMemAlloc is
// usable, zero-filled and freed once; an all-reduce on it works on one rank too.
TEST_F(BadInput, MemAllocAndFree) {
  expectRejected(zcollMemAlloc(nullptr, 64), zcollInvalidArgument, "ptr", "NULL ptr");
  void* p = reinterpret_cast<void*>(1);
  expectRejected(zcollMemAlloc(&p, 0), zcollInvalidArgument, "size", "size 0");
  expectRejected(zcollMemAlloc(&p, SIZE_MAX), zcollInvalidArgument, "size", "size beyond the address space");
  expectRejected(zcollMemFree(nullptr), zcollInvalidArgument, "ptr", "NULL ptr");
  expectRejected(zcollMemFree(buf_), zcollInvalidArgument, "ptr", "not an allocation");

  float* a = nullptr;
  ASSERT_EQ(zcollMemAlloc(reinterpret_cast<void**>(&a), 3 * sizeof(float)), zcollSuccess) << zcollGetLastError(nullptr);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
  EXPECT_EQ(a[0] + a[1] + a[2], 0.0f);
  a[0] = 1, a[1] = 2, a[2] = 3;
  EXPECT_EQ(zcollAllReduce(a, a, 3, zcollFloat, zcollSum, comm_, nullptr), zcollSuccess);
  EXPECT_EQ(a[2], 3.0f);
  expectRejected(zcollMemFree(a + 1), zcollInvalidArgument, "ptr", "inside an allocation");
  EXPECT_EQ(zcollMemFree(a), zcollSuccess);
  expectRejected(zcollMemFree(a), zcollInvalidArgument, "ptr", "freed twice");
}

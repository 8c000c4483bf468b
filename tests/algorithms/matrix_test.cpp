// matrix_test.cpp - the collective matrix: every registered algorithm x collective x data type x op
// x in-place/out-of-place x count class x rank count, checked element by element against the tests'
// own reference (typed.hpp). A 256-byte chunk and 2-slot FIFOs force the multi-chunk and FIFO-full
// paths. Each algorithm is forced through the config; a rank count it declares unsupported is skipped.
//
// With ZCOLL_DEVICE=emulated and ZCOLL_TEST_DEVICE_BUFFERS=1 the buffers are the emulated device's
// memory and every call is ordered on the rank's stream (the device path: executor, stream waits,
// cuda_ipc or registered host slots); the check runs after the stream has drained. That run takes the
// sampled pairs (sampledPairs()).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "algorithms/registry.hpp"
#include "device/device_emulated.hpp"
#include "tests/common/rank_pool.hpp"
#include "tests/common/typed.hpp"

namespace zcoll::test {
namespace {

constexpr int kChunkBytes = 256;
constexpr unsigned char kPoison = 0xA5;

// Counts of every class: 0, 1, fewer than the ranks, odd, and many chunks per block.
std::vector<size_t> countsFor(int nranks, size_t es) {
  std::vector<size_t> c = {0, 1, 37, 3 * static_cast<size_t>(nranks) * (kChunkBytes / es) + 5};
  if (nranks > 2) c.push_back(static_cast<size_t>(nranks) - 1);
  return c;
}

zcollConfig_t smallChunks(const char* algo) {
  zcollConfig_t c = ZCOLL_CONFIG_INITIALIZER;
  c.algo = algo;
  c.chunkBytes = kChunkBytes;
  c.fifoSlots = 2;
  c.timeoutMs = 60000;
  return c;
}

struct Case {
  Collective coll;
  zcollDataType_t type;
  zcollRedOp_t op;
  bool inPlace;
  size_t count;
  int root;
};

std::string describe(const Case& k, int nranks) {
  return std::string(collectiveName(k.coll)) + " " + typeName(k.type) + " " + opName(k.op) +
         (k.inPlace ? " in-place" : " out-of-place") + " count=" + std::to_string(k.count) +
         " root=" + std::to_string(k.root) + " nranks=" + std::to_string(nranks);
}

bool deviceBuffers() {
  static const bool on = [] {
    const char* v = std::getenv("ZCOLL_TEST_DEVICE_BUFFERS");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

// Every type with sum, and every op on one float and one integer type: the runs that add code paths
// which do not depend on the pair (device buffers, whose emulated kernels are the host run's; the
// tcp transport under sanitizers, whose release run checks every pair) cover element sizes and the
// divisor that way, at a third of the cases.
bool sampledPairs() {
  static const bool on = [] {
    const char* v = std::getenv("ZCOLL_TEST_SAMPLED_PAIRS");
    return deviceBuffers() || (v && std::strcmp(v, "1") == 0);
  }();
  return on;
}

// A buffer of the memory the run tests: host (a vector) or emulated device memory, host-readable.
class Buffer {
 public:
  Buffer(size_t bytes, unsigned char fill) : bytes_(bytes) {
    if (deviceBuffers()) {
      EXPECT_TRUE(emulatedDevice()->alloc(bytes, &dev_).isOk());
    } else {
      host_.resize(bytes);
    }
    std::memset(data(), fill, bytes);
  }
  ~Buffer() {
    if (dev_) emulatedDevice()->free(dev_);
  }
  unsigned char* data() { return dev_ ? static_cast<unsigned char*>(dev_) : host_.data(); }
  size_t size() const { return bytes_; }
  unsigned char operator[](size_t i) { return data()[i]; }

 private:
  size_t bytes_;
  void* dev_ = nullptr;
  std::vector<unsigned char> host_;
};

// The rank's stream (one per rank thread, as one per GPU process): device runs only.
zcollStream_t rankStream() {
  if (!deviceBuffers()) return nullptr;
  struct Owned {
    DevStream s = nullptr;
    Owned() { EXPECT_TRUE(emulatedDevice()->streamCreate(&s).isOk()); }
    ~Owned() { emulatedDevice()->streamDestroy(s); }
  };
  thread_local Owned owned;
  return owned.s;
}

// Runs one case on one rank and checks its output.
void runCase(const Case& k, int rank, int nranks, zcollComm_t comm) {
  const size_t es = typeSize(k.type);
  const size_t n = k.count, N = static_cast<size_t>(nranks);
  size_t sendElems = 0, recvElems = 0;
  bufferElems(k.coll, n, N, &sendElems, &recvElems);
  // One allocation for both buffers so in-place layouts are exact; guard bytes around.
  Buffer send(sendElems * es + 64, kPoison), recv(recvElems * es + 64, kPoison);
  zcollStream_t stream = rankStream();
  void* sbuf = send.data();
  void* rbuf = recv.data();
  const zcollRedOp_t inputOp = traits(k.coll).reduces ? k.op : zcollSum;
  const bool atRoot = rank == k.root;

  // Inputs (in their in-place position where needed).
  switch (k.coll) {
    case Collective::AllReduce: case Collective::Reduce: case Collective::Broadcast:
      fillInput(k.type, inputOp, rank, k.inPlace ? rbuf : sbuf, n);
      if (k.inPlace) sbuf = rbuf;
      break;
    case Collective::ReduceScatter:
      fillInput(k.type, inputOp, rank, sbuf, n * N);
      if (k.inPlace) rbuf = static_cast<char*>(sbuf) + rank * n * es;
      break;
    case Collective::AllGather:
      if (k.inPlace) sbuf = static_cast<char*>(rbuf) + rank * n * es;
      fillInput(k.type, inputOp, rank, sbuf, n);
      break;
    case Collective::Gather:
      if (k.inPlace && atRoot) sbuf = static_cast<char*>(rbuf) + rank * n * es;
      fillInput(k.type, inputOp, rank, sbuf, n);
      break;
    case Collective::Scatter:
      if (atRoot) fillInput(k.type, inputOp, rank, sbuf, n * N);
      if (k.inPlace && atRoot) rbuf = static_cast<char*>(sbuf) + rank * n * es;
      break;
    case Collective::AllToAll:
      fillInput(k.type, inputOp, rank, sbuf, n * N);
      break;
    default: FAIL() << describe(k, nranks) << ": not a collective of the matrix";
  }

  zcollResult_t r = zcollSuccess;
  switch (k.coll) {
    case Collective::AllReduce: r = zcollAllReduce(sbuf, rbuf, n, k.type, k.op, comm, stream); break;
    case Collective::ReduceScatter: r = zcollReduceScatter(sbuf, rbuf, n, k.type, k.op, comm, stream); break;
    case Collective::Reduce: r = zcollReduce(sbuf, rbuf, n, k.type, k.op, k.root, comm, stream); break;
    case Collective::AllGather: r = zcollAllGather(sbuf, rbuf, n, k.type, comm, stream); break;
    case Collective::Broadcast: r = zcollBroadcast(sbuf, rbuf, n, k.type, k.root, comm, stream); break;
    case Collective::Gather: r = zcollGather(sbuf, rbuf, n, k.type, k.root, comm, stream); break;
    case Collective::Scatter: r = zcollScatter(sbuf, rbuf, n, k.type, k.root, comm, stream); break;
    case Collective::AllToAll: r = zcollAlltoAll(sbuf, rbuf, n, k.type, comm, stream); break;
    default: break;
  }
  ASSERT_EQ(r, zcollSuccess) << describe(k, nranks) << " rank " << rank << ": " << zcollGetLastError(comm);
  if (stream) {
    ASSERT_TRUE(emulatedDevice()->synchronize(stream).isOk());
    zcollResult_t async = zcollSuccess;
    ASSERT_EQ(zcollCommGetAsyncError(comm, &async), zcollSuccess);
    ASSERT_EQ(async, zcollSuccess) << describe(k, nranks) << " rank " << rank << ": " << zcollGetLastError(comm);
  }

  std::vector<unsigned char> expect(recvElems * es + 64, kPoison);
  const unsigned char* out = static_cast<const unsigned char*>(rbuf);
  size_t outElems = recvElems;
  switch (k.coll) {
    case Collective::AllReduce:
      for (size_t i = 0; i < n; ++i) storeExpected(k.type, k.op, nranks, expect.data(), i, i);
      break;
    case Collective::Reduce:
      if (rank == k.root) {
        for (size_t i = 0; i < n; ++i) storeExpected(k.type, k.op, nranks, expect.data(), i, i);
      } else if (!k.inPlace) {
        outElems = recvElems;  // recvbuff must be untouched: expect stays all poison
      } else {
        fillInput(k.type, inputOp, rank, expect.data(), n);  // in place: our input, unchanged
      }
      break;
    case Collective::ReduceScatter:
      for (size_t i = 0; i < n; ++i) storeExpected(k.type, k.op, nranks, expect.data(), i, rank * n + i);
      break;
    case Collective::AllGather:
      for (int q = 0; q < nranks; ++q)
        fillInput(k.type, inputOp, q, expect.data() + q * n * es, n);
      break;
    case Collective::Broadcast:
      fillInput(k.type, inputOp, k.root, expect.data(), n);
      break;
    case Collective::Gather:
      if (atRoot) {
        for (int q = 0; q < nranks; ++q) fillInput(k.type, inputOp, q, expect.data() + q * n * es, n);
      } else if (k.inPlace) {
        outElems = 0;  // non-root recvbuff is not used
      }
      break;
    case Collective::Scatter:
      fillInput(k.type, inputOp, k.root, expect.data(), n, rank * n);
      break;
    case Collective::AllToAll:
      for (int q = 0; q < nranks; ++q) fillInput(k.type, inputOp, q, expect.data() + q * n * es, n, rank * n);
      break;
    default: break;
  }
  size_t bad = firstMismatch(out, expect.data(), outElems, es);
  EXPECT_EQ(bad, outElems) << describe(k, nranks) << ": rank " << rank << " wrong at element " << bad << " ("
                           << countMismatches(out, expect.data(), outElems, es) << " wrong)";
  // Nothing written past the output.
  if (!(k.inPlace && (k.coll == Collective::ReduceScatter || (k.coll == Collective::Scatter && atRoot)))) {
    for (size_t b = recvElems * es; b < recv.size(); ++b)
      ASSERT_EQ(recv[b], kPoison) << describe(k, nranks) << ": rank " << rank << " wrote past recvbuff";
  }
}

struct Param {
  int nranks;
  Collective coll;
  const Algorithm* algo;
};

// Every (rank count, collective, registered algorithm of that collective).
std::vector<Param> allParams() {
  std::vector<Param> out;
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8})
    for (int i = 0; i < kNumCollectives; ++i) {  // every collective of the table but send/recv and barrier
      const auto c = static_cast<Collective>(i);
      if (c == Collective::SendRecv || c == Collective::Barrier) continue;
      for (const Algorithm* a : allAlgorithms())
        if (a->collective() == c) out.push_back({n, c, a});
    }
  return out;
}

class Matrix : public ::testing::TestWithParam<Param> {};

TEST_P(Matrix, ElementByElement) {
  const auto [nranks, coll, algo] = GetParam();
  const std::string algoName(algo->name());
  // An algorithm for ranks on several hosts cannot run on the threads of one process.
  const Status support = algo->supports(nranks);
  if (!support && support.message().find("several hosts") != std::string::npos)
    GTEST_SKIP() << algoName << ": " << support.message() << " - tests/netns/run.sh checks it (tests/proc/collective_check.cpp)";
  // A parameter the algorithm does not serve (rhd reduce-scatter at 3 ranks) says so.
  if (!support) GTEST_SKIP() << algoName << " serves no case at " << nranks << " ranks: " << support.message();
  // eager serves host buffers only (a ZCOLL_ALGO rule naming it falls through for device ops).
  if (deviceBuffers() && !algo->servesDevice()) GTEST_SKIP() << algoName << " serves host buffers only";
  RankPool pool(nranks, smallChunks(algoName.c_str()));
  ASSERT_TRUE(pool.ok());
  const bool reduces = traits(coll).reduces;
  const bool rooted = traits(coll).rooted;
  std::vector<int> roots = {0};
  int ran = 0;
  if (rooted && nranks > 1) roots.push_back(nranks - 1);
  for (zcollDataType_t type : kAllTypes) {
    for (zcollRedOp_t op : kAllOps) {
      if (!reduces && op != zcollSum) continue;
      if (sampledPairs() && op != zcollSum && type != zcollFloat32 && type != zcollInt32) continue;
      for (bool inPlace : {false, true}) {
        if (inPlace && coll == Collective::AllToAll) continue;  // not defined for all-to-all
        for (size_t count : countsFor(nranks, typeSize(type))) {
          for (int root : roots) {
            Case k{coll, type, op, inPlace, count, root};
            pool.run([&](int rank, zcollComm_t comm) { runCase(k, rank, nranks, comm); });
            if (HasFatalFailure() || ::testing::Test::HasFailure()) return;
            ++ran;
          }
        }
      }
    }
  }
  EXPECT_GT(ran, 0) << algoName << " at " << nranks << " ranks: no case ran";
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Matrix, ::testing::ValuesIn(allParams()), [](const auto& info) {
  return std::string(collectiveName(info.param.coll)) + "_" + std::string(info.param.algo->name()) + "_" +
         std::to_string(info.param.nranks) + "ranks";
});

}  // namespace
}  // namespace zcoll::test

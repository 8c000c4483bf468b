// device_test.cpp - device buffers through the C ABI on the host-emulated device (ZCOLL_DEVICE is
// set to emulated by meson): NCCL's stream semantics (an op starts after the work queued before it
// on its stream, later work waits for it, the caller does not block), the *Async forms, groups of
// device send/recv, the choice of transport, bad input, failures that must not leave a stream stuck,
// and no device memory left behind. The collective matrix covers every algorithm x type x op on
// device buffers (meson test "collective matrix device"); cuda_test.cpp covers a real GPU.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/handles.hpp"
#include "device/device_emulated.hpp"
#include "tests/common/rank_pool.hpp"
#include "tests/common/run_command.hpp"

namespace zcoll::test {
namespace {

EmulatedDeviceRuntime* dev() { return emulatedDevice(); }

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) : bytes(bytes) { EXPECT_TRUE(dev()->alloc(bytes, &ptr).isOk()); }
  ~DeviceBuffer() { dev()->free(ptr); }
  float* f() { return static_cast<float*>(ptr); }
  void* ptr = nullptr;
  size_t bytes;
};

struct Stream {
  Stream() { EXPECT_TRUE(dev()->streamCreate(&s).isOk()); }
  ~Stream() { dev()->streamDestroy(s); }
  void sync() { EXPECT_TRUE(dev()->synchronize(s).isOk()); }
  DevStream s = nullptr;
};

zcollConfig_t config(const char* transports = nullptr) {
  zcollConfig_t c = ZCOLL_CONFIG_INITIALIZER;
  c.timeoutMs = 20000;
  c.chunkBytes = 4096;
  c.transports = transports;
  return c;
}

zcollResult_t asyncError(zcollComm_t comm) {
  zcollResult_t r = zcollSuccess;
  EXPECT_EQ(zcollCommGetAsyncError(comm, &r), zcollSuccess);
  return r;
}

class Device : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    ASSERT_NE(deviceRuntime(), nullptr) << "the device tests need ZCOLL_DEVICE=emulated (meson sets it)";
    ASSERT_EQ(deviceRuntime()->name(), "emulated");
  }
};

// Work queued before the op on its stream runs first (it writes the input late); the call returns
// before the op has run; work queued after it sees the result.
TEST_P(Device, OrderedOnTheCallersStream) {
  const int n = GetParam();
  RankPool pool(n, config());
  ASSERT_TRUE(pool.ok());
  constexpr size_t kCount = 40000;  // several chunks
  pool.run([&](int rank, zcollComm_t comm) {
    Stream stream;
    DeviceBuffer buf(kCount * sizeof(float));
    std::memset(buf.ptr, 0, buf.bytes);
    std::atomic<bool> inputWritten{false};
    ASSERT_TRUE(dev()->launchHost(stream.s, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      for (size_t i = 0; i < kCount; ++i) buf.f()[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 7);
      inputWritten = true;
    }).isOk());
    ASSERT_EQ(zcollAllReduce(buf.ptr, buf.ptr, kCount, zcollFloat32, zcollSum, comm, stream.s), zcollSuccess)
        << zcollGetLastError(comm);
    EXPECT_FALSE(inputWritten.load()) << "the call waited for the stream: it must not block the caller";
    std::vector<float> seen(kCount, -1.0f);
    ASSERT_TRUE(dev()->launchHost(stream.s, [&] { std::memcpy(seen.data(), buf.ptr, buf.bytes); }).isOk());
    stream.sync();
    EXPECT_EQ(asyncError(comm), zcollSuccess) << zcollGetLastError(comm);
    const float ranksSum = static_cast<float>(n * (n + 1) / 2);
    for (size_t i = 0; i < kCount; ++i)
      ASSERT_EQ(seen[i], ranksSum + static_cast<float>(n) * static_cast<float>(i % 7)) << "element " << i;
  });
}

// Many ops in a row on one stream, each reading the previous one's output.
TEST_P(Device, BackToBackOpsChain) {
  const int n = GetParam();
  RankPool pool(n, config());
  ASSERT_TRUE(pool.ok());
  pool.run([&](int, zcollComm_t comm) {
    Stream stream;
    DeviceBuffer a(1000 * sizeof(float)), b(1000 * n * sizeof(float));
    for (int i = 0; i < 1000; ++i) a.f()[i] = 1.0f;
    for (int round = 0; round < 8; ++round)
      ASSERT_EQ(zcollAllReduce(a.ptr, a.ptr, 1000, zcollFloat32, zcollSum, comm, stream.s), zcollSuccess);
    ASSERT_EQ(zcollAllGather(a.ptr, b.ptr, 1000, zcollFloat32, comm, stream.s), zcollSuccess);
    stream.sync();
    ASSERT_EQ(asyncError(comm), zcollSuccess) << zcollGetLastError(comm);
    float want = 1.0f;
    for (int round = 0; round < 8; ++round) want *= static_cast<float>(n);
    for (int i = 0; i < 1000 * n; ++i) ASSERT_EQ(b.f()[i], want) << i;
  });
}

// The *Async forms take device buffers too: no stream, the request orders and completes the op.
TEST_P(Device, AsyncRequestCompletes) {
  const int n = GetParam();
  RankPool pool(n, config());
  ASSERT_TRUE(pool.ok());
  pool.run([&](int rank, zcollComm_t comm) {
    DeviceBuffer buf(513 * sizeof(float));
    for (int i = 0; i < 513; ++i) buf.f()[i] = static_cast<float>(rank);
    zcollRequest_t req = nullptr;
    ASSERT_EQ(zcollAllReduceAsync(buf.ptr, buf.ptr, 513, zcollFloat32, zcollMax, comm, &req), zcollSuccess);
    ASSERT_EQ(zcollWait(req), zcollSuccess) << zcollGetLastError(comm);
    for (int i = 0; i < 513; ++i) ASSERT_EQ(buf.f()[i], static_cast<float>(n - 1));
  });
}

// A group of device sends and receives (a ring shift) on one stream.
TEST_P(Device, GroupedSendRecv) {
  const int n = GetParam();
  RankPool pool(n, config());
  ASSERT_TRUE(pool.ok());
  pool.run([&](int rank, zcollComm_t comm) {
    Stream stream;
    constexpr size_t kCount = 10000;
    DeviceBuffer out(kCount * sizeof(float)), in(kCount * sizeof(float));
    for (size_t i = 0; i < kCount; ++i) out.f()[i] = static_cast<float>(rank * 100000 + static_cast<int>(i));
    ASSERT_EQ(zcollGroupStart(), zcollSuccess);
    ASSERT_EQ(zcollSend(out.ptr, kCount, zcollFloat32, (rank + 1) % n, comm, stream.s), zcollSuccess);
    ASSERT_EQ(zcollRecv(in.ptr, kCount, zcollFloat32, (rank + n - 1) % n, comm, stream.s), zcollSuccess);
    ASSERT_EQ(zcollGroupEnd(), zcollSuccess) << zcollGetLastError(comm);
    stream.sync();
    ASSERT_EQ(asyncError(comm), zcollSuccess) << zcollGetLastError(comm);
    const int from = (rank + n - 1) % n;
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(in.f()[i], static_cast<float>(from * 100000 + static_cast<int>(i)));
  });
}

// Collectives inside a group: queued at the end, in order, on their streams.
TEST_P(Device, GroupedCollectives) {
  const int n = GetParam();
  RankPool pool(n, config());
  ASSERT_TRUE(pool.ok());
  pool.run([&](int rank, zcollComm_t comm) {
    Stream stream;
    DeviceBuffer a(777 * sizeof(float)), b(777 * sizeof(float));
    for (int i = 0; i < 777; ++i) a.f()[i] = static_cast<float>(rank + i);
    ASSERT_EQ(zcollGroupStart(), zcollSuccess);
    ASSERT_EQ(zcollAllReduce(a.ptr, b.ptr, 777, zcollFloat32, zcollMax, comm, stream.s), zcollSuccess);
    ASSERT_EQ(zcollBroadcast(b.ptr, a.ptr, 777, zcollFloat32, 0, comm, stream.s), zcollSuccess);
    ASSERT_EQ(zcollGroupEnd(), zcollSuccess) << zcollGetLastError(comm);
    stream.sync();
    ASSERT_EQ(asyncError(comm), zcollSuccess) << zcollGetLastError(comm);
    for (int i = 0; i < 777; ++i) ASSERT_EQ(a.f()[i], static_cast<float>(n - 1 + i)) << i;
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Device, ::testing::Values(2, 3, 4), [](const auto& info) {
  return std::to_string(info.param) + "ranks";
});

// Which transport device ops use: cuda_ipc on one host, else the host transport's registered slots.
TEST(DeviceTransport, CudaIpcByDefaultHostSlotsWhenAsked) {
  for (const char* transports : {static_cast<const char*>(nullptr), "shm", "tcp"}) {
    RankPool pool(2, config(transports));
    ASSERT_TRUE(pool.ok());
    pool.run([&](int rank, zcollComm_t comm) {
      const std::string want = transports ? transports : "cuda_ipc";
      EXPECT_EQ(comm->impl->deviceTransportName(), want);
      Stream stream;
      DeviceBuffer buf(3000 * sizeof(int32_t));
      auto* v = static_cast<int32_t*>(buf.ptr);
      for (int i = 0; i < 3000; ++i) v[i] = rank + i;
      ASSERT_EQ(zcollAllReduce(buf.ptr, buf.ptr, 3000, zcollInt32, zcollSum, comm, stream.s), zcollSuccess);
      stream.sync();
      ASSERT_EQ(asyncError(comm), zcollSuccess) << want << ": " << zcollGetLastError(comm);
      for (int i = 0; i < 3000; ++i) ASSERT_EQ(v[i], 1 + 2 * i) << want;
    });
  }
}

// Bad input is refused at the call, naming the argument, and nothing is queued.
TEST(DeviceBadInput, MixedKindsAndStreamsWithHostBuffers) {
  RankPool pool(2, config());
  ASSERT_TRUE(pool.ok());
  pool.run([&](int, zcollComm_t comm) {
    Stream stream;
    DeviceBuffer d(64 * sizeof(float));
    std::vector<float> h(64);
    EXPECT_EQ(zcollAllReduce(d.ptr, h.data(), 64, zcollFloat32, zcollSum, comm, stream.s), zcollInvalidArgument);
    EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("sendbuff is device memory but recvbuff is host memory"),
              std::string::npos)
        << zcollGetLastError(nullptr);
    EXPECT_EQ(zcollAllReduce(h.data(), h.data(), 64, zcollFloat32, zcollSum, comm, stream.s), zcollInvalidArgument);
    EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("stream: must be NULL for host buffers"), std::string::npos)
        << zcollGetLastError(nullptr);
    // The communicator is still fine afterwards.
    ASSERT_EQ(zcollAllReduce(d.ptr, d.ptr, 64, zcollFloat32, zcollSum, comm, stream.s), zcollSuccess);
    stream.sync();
    EXPECT_EQ(asyncError(comm), zcollSuccess);
  });
}

// A peer that never joins: the op fails within the timeout, the communicator reports the error, and
// the caller's stream is released (work after the op runs) instead of waiting forever.
TEST(DeviceFailure, TimeoutReleasesTheStream) {
  zcollConfig_t c = config();
  c.timeoutMs = 400;
  RankPool pool(2, c);
  ASSERT_TRUE(pool.ok());
  pool.run([&](int rank, zcollComm_t comm) {
    if (rank == 1) return;  // rank 1 does not take part
    Stream stream;
    DeviceBuffer buf(1024 * sizeof(float));
    ASSERT_EQ(zcollAllReduce(buf.ptr, buf.ptr, 1024, zcollFloat32, zcollSum, comm, stream.s), zcollSuccess);
    std::atomic<bool> after{false};
    ASSERT_TRUE(dev()->launchHost(stream.s, [&] { after = true; }).isOk());
    stream.sync();
    EXPECT_TRUE(after.load());
    EXPECT_EQ(asyncError(comm), zcollTimeout);
    EXPECT_NE(std::string(zcollGetLastError(comm)).find("timed out"), std::string::npos) << zcollGetLastError(comm);
  });
}

// Work queued before the op that never finishes within the timeout fails the op, not the process.
TEST(DeviceFailure, StreamThatNeverGetsThereTimesOut) {
  zcollConfig_t c = config();
  c.timeoutMs = 300;
  RankPool pool(2, c);
  ASSERT_TRUE(pool.ok());
  pool.run([&](int, zcollComm_t comm) {
    Stream stream;
    DeviceBuffer buf(256);
    ASSERT_TRUE(dev()->launchHost(stream.s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(900)); }).isOk());
    ASSERT_EQ(zcollAllReduce(buf.ptr, buf.ptr, 64, zcollFloat32, zcollSum, comm, stream.s), zcollSuccess);
    stream.sync();
    EXPECT_EQ(asyncError(comm), zcollTimeout);
    EXPECT_NE(std::string(zcollGetLastError(comm)).find("did not finish within the timeout"), std::string::npos)
        << zcollGetLastError(comm);
  });
}

// Creating and destroying communicators with device state leaves no device memory behind (the cuda_ipc
// FIFOs, the scratch), and destroy with ops still queued on a stream waits for them.
TEST(DeviceResources, NothingLeftAfterDestroy) {
  const size_t before = dev()->allocatedBytes();
  for (int round = 0; round < 3; ++round) {
    RankPool pool(3, config());
    ASSERT_TRUE(pool.ok());
    pool.run([&](int rank, zcollComm_t comm) {
      Stream stream;
      DeviceBuffer buf(5000 * sizeof(double));
      std::memset(buf.ptr, 0, buf.bytes);
      double* data = static_cast<double*>(buf.ptr);
      ASSERT_EQ(zcollReduceScatter(data, data + rank * 1000, 1000, zcollFloat64, zcollSum, comm, stream.s),
                zcollSuccess)
          << zcollGetLastError(comm);
      stream.sync();
    });
  }
  EXPECT_EQ(dev()->allocatedBytes(), before);
}

// Ranks as processes: the cuda_ipc data plane's fds cross process boundaries (device_rank.cpp).
TEST(DeviceProcesses, ThreeProcessesOverCudaIpc) {
  const char* run = std::getenv("ZCOLL_RUN");
  const char* prog = std::getenv("ZCOLL_DEVICE_RANK");
  ASSERT_TRUE(run && prog) << "meson sets ZCOLL_RUN and ZCOLL_DEVICE_RANK";
  for (int n : {2, 3}) {
    const CommandResult r = runCommand(std::string(run) + " -n " + std::to_string(n) + " " + prog);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("all results right"), std::string::npos) << r.out;
  }
}

// zcoll-bench --device: device buffers, a stream per rank, the check against the host's expectation.
TEST(DeviceBench, BenchmarkOnDeviceBuffersChecksItsResults) {
  const char* bench = std::getenv("ZCOLL_BENCH");
  ASSERT_TRUE(bench) << "meson sets ZCOLL_BENCH";
  for (const char* coll : {"allreduce", "allgather", "reducescatter", "broadcast"}) {
    const CommandResult r =
        runCommand(std::string(bench) + " " + coll + " -p 3 --device -b 8 -e 1M -f 32 -R 1 -n 3 -w 1 --no-progress");
    EXPECT_EQ(r.status, 0) << coll << ":\n" << r.out;
    EXPECT_NE(r.out.find("# wrong total: 0"), std::string::npos) << coll << ":\n" << r.out;
  }
}

}  // namespace
}  // namespace zcoll::test

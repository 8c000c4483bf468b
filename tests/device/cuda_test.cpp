// cuda_test.cpp - device buffers on a real GPU: the reduction kernels against the host kernels, bit
// for bit, for every type x op x alignment; collectives on cudaMalloc'd buffers with ranks as threads
// sharing the GPU (over cuda_ipc, and over the shm transport's registered slots), ordered on each
// rank's cudaStream. Every test skips, with the reason, where there is no GPU (this CI machine):
// tools/gpu-check runs them on a machine that has one.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "kernels/host_reduce.hpp"
#include "tests/common/rank_pool.hpp"
#include "tests/common/typed.hpp"

namespace zcoll::test {
namespace {

DeviceRuntime* cudaOrSkip(std::string* why) {
  DeviceRuntime* rt = deviceRuntime();
  if (rt && rt->name() == "cuda") return rt;
  *why = rt ? std::string("the process's device runtime is ") + std::string(rt->name())
            : std::string("no CUDA device: ") + std::string(deviceRuntimeAbsence());
  return nullptr;
}

#define REQUIRE_GPU()                                  \
  std::string whyNot;                                  \
  DeviceRuntime* rt = cudaOrSkip(&whyNot);             \
  if (!rt) GTEST_SKIP() << whyNot;                     \
  (void)rt

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

// Random bytes that are valid inputs for every op (no NaN surprises: floats from small integers).
void fillRandom(zcollDataType_t t, std::vector<unsigned char>* buf, size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-20, 20);
  for (size_t i = 0; i < n; ++i) store(t, buf->data(), i, static_cast<double>(dist(gen)) / (isFloat(t) ? 4.0 : 1.0));
}

TEST(CudaKernels, EveryTypeAndOpMatchesTheHostKernelsBitForBit) {
  REQUIRE_GPU();
  DevStream s = nullptr;
  ASSERT_TRUE(rt->streamCreate(&s).isOk());
  const size_t n = 100'003;  // vectors and a tail
  for (zcollDataType_t t : kAllTypes) {
    const size_t es = typeSize(t);
    std::vector<unsigned char> a(n * es + 64), b(n * es + 64), want(n * es + 64), got(n * es + 64);
    fillRandom(t, &a, n + 64 / es, 1);
    fillRandom(t, &b, n + 64 / es, 2);
    void *da = nullptr, *db = nullptr, *dd = nullptr, *dd2 = nullptr;
    CUDA_OK(cudaMalloc(&da, a.size()));
    CUDA_OK(cudaMalloc(&db, b.size()));
    CUDA_OK(cudaMalloc(&dd, a.size()));
    CUDA_OK(cudaMalloc(&dd2, a.size()));
    CUDA_OK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice));
    for (zcollRedOp_t op : kAllOps) {
      for (size_t offset : {size_t{0}, es}) {  // aligned (vectors) and misaligned (scalar path)
        const int divisor = op == zcollAvg ? 3 : 0;
        auto* pa = static_cast<char*>(da) + offset;
        auto* pb = static_cast<char*>(db) + offset;
        ASSERT_TRUE(rt->reduceAsync(dd, dd2, pa, pb, n, static_cast<DataType>(t), static_cast<RedOp>(op), divisor, s)
                        .isOk());
        bool done = false;
        while (!done) ASSERT_TRUE(rt->streamQuery(s, &done).isOk());
        CUDA_OK(cudaMemcpy(got.data(), dd, n * es, cudaMemcpyDeviceToHost));
        reduceFunction(static_cast<DataType>(t), static_cast<RedOp>(op))(want.data(), a.data() + offset,
                                                                          b.data() + offset, n);
        if (divisor) finalizeFunction(static_cast<DataType>(t), static_cast<RedOp>(op))(want.data(), n, divisor);
        const size_t bad = firstMismatch(got.data(), want.data(), n, es);
        EXPECT_EQ(bad, n) << typeName(t) << " " << opName(op) << " offset " << offset << ": first mismatch at " << bad;
        CUDA_OK(cudaMemcpy(got.data(), dd2, n * es, cudaMemcpyDeviceToHost));
        EXPECT_EQ(firstMismatch(got.data(), want.data(), n, es), n) << "second output differs";
      }
    }
    cudaFree(da);
    cudaFree(db);
    cudaFree(dd);
    cudaFree(dd2);
  }
  rt->streamDestroy(s);
}

class CudaCollectives : public ::testing::TestWithParam<std::tuple<int, const char*>> {};

// All-reduce, all-gather, reduce-scatter and broadcast on cudaMalloc'd buffers; the input is copied
// in and the output out on the rank's stream, around the collective: the copies must be ordered.
TEST_P(CudaCollectives, OrderedOnTheStreamAndExact) {
  REQUIRE_GPU();
  const auto [nranks, transports] = GetParam();
  zcollConfig_t c = ZCOLL_CONFIG_INITIALIZER;
  c.timeoutMs = 60000;
  c.transports = transports;
  RankPool pool(nranks, c);
  ASSERT_TRUE(pool.ok());
  const size_t N = static_cast<size_t>(nranks);
  for (zcollDataType_t t : {zcollFloat32, zcollBfloat16, zcollInt64}) {
    for (size_t count : {size_t{1}, size_t{4099}, size_t{3} << 20}) {
      pool.run([&](int rank, zcollComm_t comm) {
        cudaStream_t stream = nullptr;
        CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        const size_t es = typeSize(t);
        std::vector<unsigned char> in(count * N * es), out(count * N * es), want(count * N * es);
        fillInput(t, zcollSum, rank, in.data(), count * N);
        void *dIn = nullptr, *dOut = nullptr;
        CUDA_OK(cudaMalloc(&dIn, in.size()));
        CUDA_OK(cudaMalloc(&dOut, out.size()));
        CUDA_OK(cudaMemcpyAsync(dIn, in.data(), in.size(), cudaMemcpyHostToDevice, stream));
        // all-reduce
        ASSERT_EQ(zcollAllReduce(dIn, dOut, count, t, zcollSum, comm, stream), zcollSuccess) << zcollGetLastError(comm);
        CUDA_OK(cudaMemcpyAsync(out.data(), dOut, count * es, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        for (size_t i = 0; i < count; ++i) storeExpected(t, zcollSum, nranks, want.data(), i, i);
        EXPECT_EQ(firstMismatch(out.data(), want.data(), count, es), count) << "allreduce " << typeName(t) << " " << count;
        // all-gather
        ASSERT_EQ(zcollAllGather(dIn, dOut, count, t, comm, stream), zcollSuccess);
        CUDA_OK(cudaMemcpyAsync(out.data(), dOut, count * N * es, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        for (int q = 0; q < nranks; ++q) fillInput(t, zcollSum, q, want.data() + q * count * es, count);
        EXPECT_EQ(firstMismatch(out.data(), want.data(), count * N, es), count * N) << "allgather " << typeName(t);
        // reduce-scatter
        ASSERT_EQ(zcollReduceScatter(dIn, dOut, count, t, zcollSum, comm, stream), zcollSuccess);
        CUDA_OK(cudaMemcpyAsync(out.data(), dOut, count * es, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        for (size_t i = 0; i < count; ++i) storeExpected(t, zcollSum, nranks, want.data(), i, rank * count + i);
        EXPECT_EQ(firstMismatch(out.data(), want.data(), count, es), count) << "reducescatter " << typeName(t);
        // broadcast from the last rank
        ASSERT_EQ(zcollBroadcast(dIn, dOut, count, t, nranks - 1, comm, stream), zcollSuccess);
        CUDA_OK(cudaMemcpyAsync(out.data(), dOut, count * es, cudaMemcpyDeviceToHost, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        fillInput(t, zcollSum, nranks - 1, want.data(), count);
        EXPECT_EQ(firstMismatch(out.data(), want.data(), count, es), count) << "broadcast " << typeName(t);
        zcollResult_t async = zcollSuccess;
        EXPECT_EQ(zcollCommGetAsyncError(comm, &async), zcollSuccess);
        EXPECT_EQ(async, zcollSuccess) << zcollGetLastError(comm);
        cudaFree(dIn);
        cudaFree(dOut);
        cudaStreamDestroy(stream);
      });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndTransports, CudaCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values(static_cast<const char*>(nullptr), "shm")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) ? "shm" : "cuda_ipc");
                         });

}  // namespace
}  // namespace zcoll::test

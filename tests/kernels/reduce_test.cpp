// reduce_test.cpp - host reduction kernels: every type x op against scalar expectations, in place
// and with odd lengths (vector tails).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/host_copy.hpp"
#include "kernels/host_reduce.hpp"
#include "kernels/host_reduce_simd.hpp"
#include "tests/common/typed.hpp"

namespace zcoll {
namespace {

TEST(HostReduce, EveryTypeAndOp) {
  for (zcollDataType_t t : test::kAllTypes) {
    for (zcollRedOp_t op : test::kAllOps) {
      const size_t es = test::typeSize(t);
      for (size_t n : {0, 1, 3, 17, 64, 1001}) {
        std::vector<char> a(n * es), b(n * es), out(n * es), expect(n * es);
        test::fillInput(t, op, 0, a.data(), n);
        test::fillInput(t, op, 1, b.data(), n);
        for (size_t i = 0; i < n; ++i) test::storeExpected(t, op == zcollAvg ? zcollSum : op, 2, expect.data(), i, i);
        ReduceFn f = reduceFunction(static_cast<DataType>(t), static_cast<RedOp>(op));
        ASSERT_NE(f, nullptr);
        f(out.data(), a.data(), b.data(), n);
        EXPECT_EQ(test::firstMismatch(out.data(), expect.data(), n, es), n)
            << test::typeName(t) << " " << test::opName(op) << " n=" << n;
        f(a.data(), a.data(), b.data(), n);  // in place
        EXPECT_EQ(test::firstMismatch(a.data(), expect.data(), n, es), n);
        FinalizeFn fin = finalizeFunction(static_cast<DataType>(t), static_cast<RedOp>(op));
        EXPECT_EQ(fin != nullptr, op == zcollAvg);
        if (fin) {
          fin(out.data(), n, 2);
          for (size_t i = 0; i < n; ++i) test::storeExpected(t, zcollAvg, 2, expect.data(), i, i);
          EXPECT_EQ(test::firstMismatch(out.data(), expect.data(), n, es), n) << test::typeName(t) << " avg";
        }
      }
    }
  }
}

// The 16-bit float kernels (vectorised where the CPU allows) against the scalar definition - widen,
// one fp32 operation, round to nearest even - on every kind of value: random bit patterns with
// zeros, subnormals, infinities and NaNs among them. NaNs must stay NaNs (payloads may differ).
TEST(HostReduce, SixteenBitFloatsMatchTheScalarDefinition) {
  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
  const size_t n = 4099;  // a tail after the 8-lane body
  std::vector<uint16_t> a(n), b(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<uint16_t>(next() >> 16);
    b[i] = static_cast<uint16_t>(next() >> 16);
  }
  a[0] = 0x7c00; b[0] = 0xfc00;  // fp16 +inf, -inf
  a[1] = 0x7e00; b[1] = 0x3c00;  // fp16 NaN, 1
  a[2] = 0x0001; b[2] = 0x0001;  // fp16 smallest subnormals
  a[3] = 0x7f80; b[3] = 0x7fc0;  // bf16 inf, NaN
  for (DataType t : {DataType::Float16, DataType::Bfloat16}) {
    const bool half = t == DataType::Float16;
    auto widen = [&](uint16_t v) { return half ? halfToFloat(v) : bf16ToFloat(v); };
    auto narrow = [&](float f) { return half ? floatToHalf(f) : floatToBf16(f); };
    auto isNan = [&](uint16_t v) { return half ? (v & 0x7fff) > 0x7c00 : (v & 0x7fff) > 0x7f80; };
    for (RedOp op : {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg}) {
      reduceFunction(t, op)(out.data(), a.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const float x = widen(a[i]), y = widen(b[i]);
        const float r = op == RedOp::Prod ? x * y : op == RedOp::Max ? (x < y ? y : x) : op == RedOp::Min ? (y < x ? y : x)
                                                                                                          : x + y;
        const uint16_t want = narrow(r);
        if (isNan(want) || isNan(out[i])) {
          EXPECT_TRUE(isNan(want) && isNan(out[i])) << (half ? "fp16" : "bf16") << " op " << static_cast<int>(op) << " i " << i;
        } else {
          ASSERT_EQ(out[i], want) << (half ? "fp16" : "bf16") << " op " << static_cast<int>(op) << " i " << i << " a "
                                  << a[i] << " b " << b[i];
        }
      }
    }
    std::vector<uint16_t> avg = a;
    finalizeFunction(t, RedOp::Avg)(avg.data(), n, 3);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = narrow(widen(a[i]) / 3.0f);
      if (!isNan(want)) {
        ASSERT_EQ(avg[i], want) << i;
      }
    }
  }
}

// The AVX2 and AVX-512 kernels of the native types against the portable ones, bit for bit, on
// random bit patterns (NaNs, infinities, subnormals among the floats), every length up to a few
// vectors (the tails), in place and out of place. A level the CPU lacks is skipped.
TEST(HostReduce, VectorKernelsMatchThePortableOnesBitForBit) {
  uint64_t seed = 88172645463325252ull;
  auto next = [&] {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    return seed;
  };
  std::vector<SimdLevel> levels;
  if (cpuSimdLevel() >= SimdLevel::Avx2) levels.push_back(SimdLevel::Avx2);
  if (cpuSimdLevel() >= SimdLevel::Avx512) levels.push_back(SimdLevel::Avx512);
  if (levels.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
  const DataType types[] = {DataType::Int8,   DataType::Uint8,  DataType::Int32,   DataType::Uint32,
                            DataType::Int64,  DataType::Uint64, DataType::Float32, DataType::Float64};
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  lengths.push_back(4099);
  for (SimdLevel level : levels) {
    for (DataType t : types) {
      const size_t es = dataTypeSize(t);
      for (RedOp op : {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min}) {
        ReduceFn vec = nativeSimdReduceFunction(t, op, level), ref = portableReduceFunction(t, op);
        ASSERT_NE(vec, nullptr);
        for (size_t n : lengths) {
          std::vector<uint8_t> a((n + 1) * es), b((n + 1) * es), want((n + 1) * es), got((n + 1) * es);
          for (auto& v : a) v = static_cast<uint8_t>(next());
          for (auto& v : b) v = static_cast<uint8_t>(next());
          ref(want.data() + es, a.data() + es, b.data() + es, n);  // one element in: not vector-aligned
          vec(got.data() + es, a.data() + es, b.data() + es, n);
          auto isNan = [&](const uint8_t* p) {
            if (t == DataType::Float32) { float f; std::memcpy(&f, p, 4); return f != f; }
            if (t == DataType::Float64) { double d; std::memcpy(&d, p, 8); return d != d; }
            return false;
          };
          for (size_t i = 0; i < n; ++i) {
            const uint8_t* w = want.data() + es + i * es;
            const uint8_t* g = got.data() + es + i * es;
            if (isNan(w) && isNan(g)) continue;  // NaN payloads may differ
            ASSERT_EQ(std::memcmp(w, g, es), 0) << simdLevelName(level) << " " << dataTypeName(t) << " "
                                               << redOpName(op) << " n=" << n << " i=" << i;
          }
          vec(a.data() + es, a.data() + es, b.data() + es, n);  // in place
          for (size_t i = 0; i < n; ++i) {
            const uint8_t* w = want.data() + es + i * es;
            const uint8_t* g = a.data() + es + i * es;
            if (isNan(w) && isNan(g)) continue;
            ASSERT_EQ(std::memcmp(w, g, es), 0) << "in place, " << simdLevelName(level) << " " << dataTypeName(t);
          }
        }
      }
    }
  }
}

// The zero-copy all-reduce's one-pass kernel: every destination gets exactly what the portable
// kernels compute pairwise over the sources (left to right), for 2-4 sources and destinations,
// every length to 300 and a long one, destinations at each element offset within a line.
TEST(HostReduce, ReduceToAllMatchesThePortableKernels) {
  uint64_t seed = 2463534242ull;
  auto next = [&] {
    seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
    return seed;
  };
  size_t line = 0;
  if (!streamReduceToAllFunction(DataType::Float32, RedOp::Sum, &line)) GTEST_SKIP() << "this CPU has no AVX2";
  EXPECT_EQ(streamReduceToAllFunction(DataType::Float32, RedOp::Avg, &line), nullptr);
  EXPECT_EQ(streamReduceToAllFunction(DataType::Float16, RedOp::Sum, &line), nullptr);
  const DataType types[] = {DataType::Int8,   DataType::Uint8,  DataType::Int32,   DataType::Uint32,
                            DataType::Int64,  DataType::Uint64, DataType::Float32, DataType::Float64};
  for (DataType t : types) {
    const size_t es = dataTypeSize(t);
    for (RedOp op : {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min}) {
      ReduceToAllFn toAll = streamReduceToAllFunction(t, op, &line);
      ReduceFn ref = portableReduceFunction(t, op);
      ASSERT_NE(toAll, nullptr);
      for (int ranks = 2; ranks <= 4; ++ranks) {
        for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{33}, size_t{300}, size_t{4099}}) {
          for (size_t shift = 0; shift < line; shift += es) {
            const size_t bytes = n * es + line;
            std::vector<std::vector<uint8_t>> src(static_cast<size_t>(ranks), std::vector<uint8_t>(bytes));
            // Destinations share one offset within a line; the sources sit one element off it.
            std::vector<std::vector<uint8_t>> dst(static_cast<size_t>(ranks), std::vector<uint8_t>(bytes + 64));
            std::vector<const void*> srcs;
            std::vector<void*> dsts;
            for (int k = 0; k < ranks; ++k) {
              for (auto& v : src[static_cast<size_t>(k)]) v = static_cast<uint8_t>(next());
              srcs.push_back(src[static_cast<size_t>(k)].data() + es);
              uint8_t* d = dst[static_cast<size_t>(k)].data();
              d += (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64 + shift;
              dsts.push_back(d);
            }
            std::vector<uint8_t> want(n * es + 1);
            ref(want.data(), srcs[0], srcs[1], n);
            for (int k = 2; k < ranks; ++k) ref(want.data(), want.data(), srcs[static_cast<size_t>(k)], n);
            toAll(dsts.data(), ranks, srcs.data(), ranks, n);
            storeFence();
            for (int k = 0; k < ranks; ++k)
              for (size_t i = 0; i < n; ++i) {
                const uint8_t* w = want.data() + i * es;
                const uint8_t* g = static_cast<const uint8_t*>(dsts[static_cast<size_t>(k)]) + i * es;
                bool nan = false;
                if (t == DataType::Float32) { float a, b; std::memcpy(&a, w, 4); std::memcpy(&b, g, 4); nan = a != a && b != b; }
                if (t == DataType::Float64) { double a, b; std::memcpy(&a, w, 8); std::memcpy(&b, g, 8); nan = a != a && b != b; }
                if (!nan) {
                  ASSERT_EQ(std::memcmp(w, g, es), 0) << dataTypeName(t) << " " << redOpName(op) << " ranks=" << ranks
                                                     << " n=" << n << " shift=" << shift << " dst " << k << " i=" << i;
                }
              }
          }
        }
      }
    }
  }
}

TEST(HostReduce, HalfConversions) {
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.5f)), 1.5f);
  EXPECT_EQ(halfToFloat(floatToHalf(-2.25f)), -2.25f);
  EXPECT_EQ(floatToBf16(1.0f + 1.0f / 256), floatToBf16(1.0f));  // ties to even
}

}  // namespace
}  // namespace zcoll

namespace zcoll {
namespace {

// copyBytes and streamBytes: every relative alignment and sizes around their thresholds copy
// exactly, nothing more.
TEST(HostCopy, EveryAlignmentAndSize) {
  std::vector<unsigned char> src(70000), dst(70000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (auto copy : {+[](void* d, const void* s, size_t n) { copyBytes(d, s, n); },
                    +[](void* d, const void* s, size_t n) { streamBytes(d, s, n); }})
  for (size_t so : {0, 1, 16, 33, 63}) {
    for (size_t d0 : {0, 5, 16, 64}) {
      for (size_t n : {0, 1, 31, 2047, 2048, 2049, 4096 + 17, 65536}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        copy(dst.data() + d0, src.data() + so, n);
        ASSERT_EQ(std::memcmp(dst.data() + d0, src.data() + so, n), 0) << so << " " << d0 << " " << n;
        if (d0 > 0) {
          ASSERT_EQ(dst[d0 - 1], 0xEE);
        }
        ASSERT_EQ(dst[d0 + n], 0xEE) << "wrote past the end";
      }
    }
  }
}

}  // namespace
}  // namespace zcoll

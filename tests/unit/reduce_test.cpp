// reduce_test.cpp - host reduction kernels: every type x op against scalar expectations, in place
// and with odd lengths (vector tails).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "algorithms/reduce/host_copy.hpp"
#include "algorithms/reduce/host_reduce.hpp"
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

TEST(HostReduce, HalfConversions) {
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.5f)), 1.5f);
  EXPECT_EQ(halfToFloat(floatToHalf(-2.25f)), -2.25f);
  EXPECT_EQ(floatToBf16(1.0f + 1.0f / 256), floatToBf16(1.0f));  // ties to even
}

}  // namespace
}  // namespace zcoll

namespace zcoll {
namespace {

// copyBytes: every relative alignment and sizes around its thresholds copy exactly, nothing more.
TEST(HostCopy, EveryAlignmentAndSize) {
  std::vector<unsigned char> src(70000), dst(70000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t so : {0, 1, 16, 33, 63}) {
    for (size_t d0 : {0, 5, 16, 64}) {
      for (size_t n : {0, 1, 31, 2047, 2048, 2049, 4096 + 17, 65536}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        copyBytes(dst.data() + d0, src.data() + so, n);
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

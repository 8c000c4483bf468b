// host_reduce_simd.hpp - vector kernels for the native types (int8...uint64, fp32, fp64), built for
// AVX2 and for AVX-512 and chosen at run time by what the CPU has; host_reduce.cpp falls back to its
// portable kernels otherwise (and for fp16/bf16, see host_reduce_f16.hpp).
//
// Each computes exactly what the portable kernel computes, lane by lane (the same operator
// definitions; integers wrap), so results are bit-identical whichever runs
// (tests/kernels/reduce_test.cpp compares them on random data, NaN and infinities included).
#pragma once

#include "kernels/host_reduce.hpp"

namespace zcoll {

enum class SimdLevel { Portable, Avx2, Avx512 };

// The best level this CPU and this build support (cached).
SimdLevel cpuSimdLevel();
const char* simdLevelName(SimdLevel level);

// The kernel of a native type at that level; nullptr for fp16/bf16, for Portable, or when the
// build has no such kernels (not x86-64).
ReduceFn nativeSimdReduceFunction(DataType type, RedOp op, SimdLevel level);

// dsts[k][i] = srcs[0][i] OP ... OP srcs[ns - 1][i] for k < nd and i < n, in one pass, the results
// stored with non-temporal stores (the zero-copy all-reduce writes every rank's recvbuff at once).
// Every dsts[k] must lie at the same offset modulo *lineBytes and at a multiple of the element
// size; the caller fences (storeFence) before publishing. nullptr (use reduceFunction through a
// block) for Avg, fp16/bf16, or a CPU without AVX2.
using ReduceToAllFn = void (*)(void* const* dsts, int nd, const void* const* srcs, int ns, size_t n);
ReduceToAllFn streamReduceToAllFunction(DataType type, RedOp op, size_t* lineBytes);

}  // namespace zcoll

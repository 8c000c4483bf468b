// host_reduce.hpp - host reduction kernels for every data type x operator.
//
// dst[i] = a[i] OP b[i]; dst may alias a or b (in-place). fp16 and bf16 are computed in fp32 and
// rounded once per call (one "step"). Signed integers wrap (computed in the unsigned type), as in
// NCCL. Avg reduces as Sum; finalizeAvg then divides the final values by the rank count.
// Chosen at run time, bit-identical to the portable kernels: fp16 and bf16 use AVX2+F16C kernels
// (host_reduce_f16.hpp), the other types AVX-512 or AVX2 kernels (host_reduce_simd.hpp), when the
// CPU has them.
#pragma once

#include <cstddef>

#include "core/types.hpp"

namespace zcoll {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t n);
using FinalizeFn = void (*)(void* data, size_t n, int divisor);

ReduceFn reduceFunction(DataType type, RedOp op);
// The portable kernel (the definition the vector kernels are tested against).
ReduceFn portableReduceFunction(DataType type, RedOp op);
// nullptr unless op needs a final pass (Avg).
FinalizeFn finalizeFunction(DataType type, RedOp op);

// Scalar conversions used by the kernels and by the tests' reference.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);  // round to nearest even; NaN stays NaN

}  // namespace zcoll

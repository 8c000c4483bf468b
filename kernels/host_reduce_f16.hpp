// host_reduce_f16.hpp - AVX2 + F16C kernels for the two 16-bit float types (fp16, bf16), chosen at run
// time when the CPU has them; host_reduce.cpp falls back to its portable kernels otherwise.
//
// They compute exactly what the portable kernels compute - widen to fp32, one fp32 operation, round
// to nearest even once - so results are bit-identical whichever runs (tests/kernels/reduce_test.cpp).
// Without them fp16 goes through libgcc's soft-float conversions (~0.1 GB/s) and bf16 through a
// scalar rounding (~1 GB/s).
#pragma once

#include "kernels/host_reduce.hpp"

namespace zcoll {

// nullptr when this CPU (or this build's target) lacks AVX2/F16C, or for another type.
ReduceFn simdReduceFunction(DataType type, RedOp op);
FinalizeFn simdFinalizeFunction(DataType type, RedOp op);

}  // namespace zcoll

// cuda_reduce.hpp - the GPU reduction kernels' launchers (cuda_reduce.cu), callable from plain C++:
// the stream is a cudaStream_t passed as void*, the result a cudaError_t as int (0 = success).
//
// dst = a OP b over n elements (and dst2 = the same when not null), then / divisor when divisor > 0,
// for every data type x operator, with the host kernels' results (host_reduce.hpp): signed integers
// wrap, fp16 and bf16 are computed in fp32 and rounded once. 16-byte loads and stores where all
// pointers are 16-byte aligned; a grid-stride loop over enough blocks to fill the device.
#pragma once

#include <cstddef>

#include "core/types.hpp"

namespace zcoll::cuda {

int launchReduce(void* dst, void* dst2, const void* a, const void* b, size_t n, DataType type, RedOp op, int divisor,
                 void* stream, int maxBlocks);
int launchDivide(void* data, size_t n, DataType type, int divisor, void* stream, int maxBlocks);

}  // namespace zcoll::cuda

// adamw.hpp - the CPU Adam/AdamW step of the ZeRO layer's optimizer (and of its offload): fp32
// parameters, gradients and both moments of one shard, updated in place. Vectorised (AVX-512 or
// AVX2, chosen at run time, bit-identical to the scalar definition: same operations in the same
// order, no contraction into FMA) and split over a persistent pool of threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace zcoll::zero {

struct AdamStep {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weightDecay = 0.01f;
  int64_t step = 1;      // 1-based, for the bias corrections
  bool decoupled = true;  // AdamW (decay the weights); false: Adam (decay added to the gradient)
  bool biasCorrection = true;  // false: the moments are used as they are (1 - b^t taken as 1)
};

// PyTorch's single-tensor Adam/AdamW, element by element:
//   AdamW: p *= 1 - lr*wd          Adam: g += wd*p
//   m = m + (1-b1)*(g - m);  v = b2*v + (1-b2)*g*g
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
void adamStepScalar(float* p, const float* g, float* m, float* v, size_t n, const AdamStep& a);

// The same, vectorised; `threads` threads (the caller's included) share the shard.
class CpuAdam {
 public:
  explicit CpuAdam(int threads = 0);  // 0: one per available core
  ~CpuAdam();
  CpuAdam(const CpuAdam&) = delete;
  CpuAdam& operator=(const CpuAdam&) = delete;

  void step(float* p, const float* g, float* m, float* v, size_t n, const AdamStep& a);
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  const char* isa() const;

 private:
  struct Job {
    float* p;
    const float* g;
    float* m;
    float* v;
    size_t n;
    AdamStep a;
  };
  void runPart(const Job& job, int part);
  void workerLoop(int part);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  Job job_{};
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace zcoll::zero

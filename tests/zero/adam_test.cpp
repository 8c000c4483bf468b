// The ZeRO layer's CPU Adam/AdamW step: the vector kernels over the thread pool equal the scalar
// definition bit for bit (every tail length, AdamW and Adam), and the scalar definition follows
// PyTorch's formula (checked against a double-precision evaluation over several steps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "adamw.hpp"

namespace zcoll::zero {
namespace {

std::vector<float> randomFloats(size_t n, uint32_t seed, float scale) {
  std::vector<float> x(n);
  for (float& f : x) {
    seed = seed * 1664525u + 1013904223u;
    f = scale * (static_cast<float>(seed >> 8) / 16777216.0f - 0.5f);
  }
  return x;
}

TEST(CpuAdam, VectorAndThreadsEqualTheScalarDefinitionBitForBit) {
  CpuAdam adam(3);
  for (bool decoupled : {true, false}) {
    for (size_t n : {size_t{1}, size_t{7}, size_t{64}, size_t{1000}, size_t{4097}, size_t{100003}}) {
      std::vector<float> p = randomFloats(n, 1, 2), g = randomFloats(n, 2, 0.1f), m(n, 0.0f), v(n, 0.0f);
      std::vector<float> p2 = p, m2 = m, v2 = v;
      for (int64_t step = 1; step <= 5; ++step) {
        AdamStep a;
        a.lr = 1e-2f;
        a.weightDecay = 0.05f;
        a.step = step;
        a.decoupled = decoupled;
        adam.step(p.data(), g.data(), m.data(), v.data(), n, a);
        adamStepScalar(p2.data(), g.data(), m2.data(), v2.data(), n, a);
      }
      ASSERT_EQ(std::memcmp(p.data(), p2.data(), n * 4), 0) << "n=" << n << " decoupled=" << decoupled;
      ASSERT_EQ(std::memcmp(m.data(), m2.data(), n * 4), 0) << "n=" << n;
      ASSERT_EQ(std::memcmp(v.data(), v2.data(), n * 4), 0) << "n=" << n;
    }
  }
  EXPECT_GE(adam.threads(), 1);
}

// bias_correction false (DeepSpeed's FusedAdam option): the moments are used without 1 - b^t.
TEST(CpuAdam, WithoutBiasCorrectionTheMomentsAreUsedAsTheyAre) {
  CpuAdam adam(2);
  const size_t n = 1001;
  std::vector<float> p = randomFloats(n, 3, 2), g = randomFloats(n, 4, 0.1f), m(n, 0.0f), v(n, 0.0f);
  const std::vector<float> p0 = p;
  AdamStep a;
  a.lr = 1e-2f;
  a.weightDecay = 0;
  a.biasCorrection = false;
  adam.step(p.data(), g.data(), m.data(), v.data(), n, a);
  for (size_t i = 0; i < n; ++i) {
    const double mi = 0.1 * g[i], vi = 0.001 * double(g[i]) * g[i];
    const double want = p0[i] - 1e-2 * mi / (std::sqrt(vi) + 1e-8);
    ASSERT_NEAR(p[i], want, 1e-6) << i;
  }
}

TEST(CpuAdam, FollowsPyTorchsAdamW) {
  const size_t n = 257;
  std::vector<float> p = randomFloats(n, 3, 1), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> pd(p.begin(), p.end()), md(n, 0.0), vd(n, 0.0);
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  for (int64_t step = 1; step <= 10; ++step) {
    std::vector<float> g = randomFloats(n, static_cast<uint32_t>(100 + step), 0.2f);
    AdamStep a;
    a.step = step;
    adamStepScalar(p.data(), g.data(), m.data(), v.data(), n, a);
    for (size_t i = 0; i < n; ++i) {  // torch.optim.AdamW, single tensor
      pd[i] *= 1 - lr * wd;
      md[i] = b1 * md[i] + (1 - b1) * g[i];
      vd[i] = b2 * vd[i] + (1 - b2) * static_cast<double>(g[i]) * g[i];
      const double denom = std::sqrt(vd[i]) / std::sqrt(1 - std::pow(b2, step)) + eps;
      pd[i] -= lr / (1 - std::pow(b1, step)) * md[i] / denom;
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], pd[i], 1e-6 * (1 + std::fabs(pd[i]))) << i;
}

}  // namespace
}  // namespace zcoll::zero

// mlp.cpp - see mlp.hpp.
#include "mlp.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace zero_train {
namespace {

using zcoll::zero::DType;

// splitmix64: the same numbers on every machine (data and weights must not depend on the library).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Rng {
  uint64_t state;
  float uniform() { return static_cast<float>((mix(state++) >> 40) * (1.0 / 16777216.0)); }  // [0, 1)
  float symmetric(float a) { return (2 * uniform() - 1) * a; }
};

}  // namespace

Mlp::Mlp(const MlpShape& shape) : s_(shape) {
  Rng rng{mix(s_.seed ^ 0x7465616368ull)};
  teacher_.resize(static_cast<size_t>(s_.input) * s_.output);
  for (float& t : teacher_) t = rng.symmetric(2.0f / std::sqrt(static_cast<float>(s_.input)));
  acts_.resize(static_cast<size_t>(s_.layers) + 1);
  for (int k = 0; k <= s_.layers; ++k) acts_[static_cast<size_t>(k)].resize(static_cast<size_t>(s_.batch) * (k == s_.layers ? s_.output : in(k)));
  target_.resize(static_cast<size_t>(s_.batch) * s_.output);
  openblas_set_num_threads(1);  // ranks are processes (or threads) of their own
}

std::vector<zcoll::zero::GroupSpec> Mlp::groups() const {
  std::vector<zcoll::zero::GroupSpec> g;
  for (int k = 0; k < s_.layers; ++k) {
    const std::string name = "layer" + std::to_string(k);
    g.push_back({name + ".weight", static_cast<int64_t>(out(k)) * in(k), {out(k), in(k)}});
    g.push_back({name + ".bias", out(k), {out(k)}});
  }
  return g;
}

int64_t Mlp::parameters() const {
  int64_t n = 0;
  for (const auto& g : groups()) n += g.numel;
  return n;
}

std::vector<float> Mlp::initialValues(int g) const {
  const int k = g / 2;
  const int64_t n = g % 2 == 0 ? static_cast<int64_t>(out(k)) * in(k) : out(k);
  std::vector<float> v(static_cast<size_t>(n));
  Rng rng{mix(s_.seed * 1000003 + static_cast<uint64_t>(g))};
  const float bound = 1.0f / std::sqrt(static_cast<float>(in(k)));  // torch.nn.Linear's
  for (float& x : v) x = rng.symmetric(bound);
  return v;
}

void Mlp::makeData(int64_t step, int micro, int rank) {
  Rng rng{mix(mix(s_.seed + 0x64617461ull) ^ mix(static_cast<uint64_t>(step) * 65537 + static_cast<uint64_t>(micro) * 257 +
                                                  static_cast<uint64_t>(rank)))};
  std::vector<float>& x = acts_[0];
  for (float& v : x) v = rng.symmetric(1.7f);
  // target = tanh(x . teacher)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s_.batch, s_.output, s_.input, 1.0f, x.data(), s_.input,
              teacher_.data(), s_.output, 0.0f, target_.data(), s_.output);
  for (float& t : target_) t = std::tanh(t);
}

const float* Mlp::asFloat(DType type, const void* p, int64_t n, std::vector<float>& scratch) const {
  if (type == DType::F32) return static_cast<const float*>(p);
  scratch.resize(static_cast<size_t>(n));
  zcoll::zero::toFloat32(type, p, scratch.data(), n);
  return scratch.data();
}

bool Mlp::addGrad(zcoll::zero::Engine& engine, int g, const float* grad, int64_t n, std::string* error) {
  zcoll::zero::Result r;
  void* dst = engine.grads(g, &r);
  if (!r.ok()) return *error = r.message, false;
  if (engine.dtype() == DType::F32) {
    cblas_saxpy(static_cast<int>(n), 1.0f, grad, 1, static_cast<float*>(dst), 1);
  } else {
    gScratch_.resize(static_cast<size_t>(n));
    zcoll::zero::toFloat32(engine.dtype(), dst, gScratch_.data(), n);
    cblas_saxpy(static_cast<int>(n), 1.0f, grad, 1, gScratch_.data(), 1);
    zcoll::zero::fromFloat32(engine.dtype(), gScratch_.data(), dst, n);
  }
  r = engine.gradsReady(g);
  if (!r.ok()) return *error = r.message, false;
  return true;
}

double Mlp::microBatch(zcoll::zero::Engine& engine, int64_t step, int micro, int rank, std::string* error) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const DType type = engine.dtype();
  auto check = [&](const zcoll::zero::Result& r) {
    if (!r.ok()) *error = r.message;
    return r.ok();
  };
  makeData(step, micro, rank);
  const int B = s_.batch;

  // Forward.
  for (int k = 0; k < s_.layers; ++k) {
    const int I = in(k), O = out(k);
    if (!check(engine.fetch(2 * k)) || !check(engine.fetch(2 * k + 1))) return nan;
    const float* w = asFloat(type, engine.params(2 * k), static_cast<int64_t>(O) * I, wScratch_);
    const float* b = asFloat(type, engine.params(2 * k + 1), O, bScratch_);
    float* y = acts_[static_cast<size_t>(k) + 1].data();
    for (int r = 0; r < B; ++r) std::copy(b, b + O, y + static_cast<size_t>(r) * O);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, O, I, 1.0f, acts_[static_cast<size_t>(k)].data(), I, w, I, 1.0f, y, O);
    if (k < s_.layers - 1)
      for (size_t i = 0; i < static_cast<size_t>(B) * O; ++i) y[i] = std::tanh(y[i]);
    if (!check(engine.release(2 * k)) || !check(engine.release(2 * k + 1))) return nan;
  }

  // Loss: mean squared error; its gradient seeded with the loss scale.
  const std::vector<float>& y = acts_[static_cast<size_t>(s_.layers)];
  const size_t outs = static_cast<size_t>(B) * s_.output;
  double loss = 0;
  delta_.resize(outs);
  const float seed = static_cast<float>(2.0 * engine.lossScale() / static_cast<double>(outs));
  for (size_t i = 0; i < outs; ++i) {
    const float d = y[i] - target_[i];
    loss += static_cast<double>(d) * d;
    delta_[i] = seed * d;
  }
  loss /= static_cast<double>(outs);

  // Backward: delta_ is dL/d(output of layer k) before its activation's derivative is applied.
  for (int k = s_.layers - 1; k >= 0; --k) {
    const int I = in(k), O = out(k);
    if (!check(engine.fetch(2 * k)) || !check(engine.fetch(2 * k + 1))) return nan;
    if (k < s_.layers - 1) {
      const float* a = acts_[static_cast<size_t>(k) + 1].data();
      for (size_t i = 0; i < static_cast<size_t>(B) * O; ++i) delta_[i] *= 1.0f - a[i] * a[i];
    }
    gradW_.resize(static_cast<size_t>(O) * I);
    gradB_.assign(static_cast<size_t>(O), 0.0f);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, I, B, 1.0f, delta_.data(), O, acts_[static_cast<size_t>(k)].data(), I,
                0.0f, gradW_.data(), I);
    for (int r = 0; r < B; ++r)
      for (int o = 0; o < O; ++o) gradB_[static_cast<size_t>(o)] += delta_[static_cast<size_t>(r) * O + o];
    if (k > 0) {
      const float* w = asFloat(type, engine.params(2 * k), static_cast<int64_t>(O) * I, wScratch_);
      deltaPrev_.resize(static_cast<size_t>(B) * I);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, I, O, 1.0f, delta_.data(), O, w, I, 0.0f, deltaPrev_.data(), I);
    }
    if (!addGrad(engine, 2 * k, gradW_.data(), static_cast<int64_t>(O) * I, error) ||
        !addGrad(engine, 2 * k + 1, gradB_.data(), O, error))
      return nan;
    if (!check(engine.release(2 * k)) || !check(engine.release(2 * k + 1))) return nan;
    if (k > 0) delta_.swap(deltaPrev_);
  }
  return loss;
}

}  // namespace zero_train

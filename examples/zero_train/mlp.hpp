// mlp.hpp - the model of examples/zero_train (and of the ZeRO tests): a multi-layer perceptron
// (Linear + tanh, a linear last layer) regressing a fixed random "teacher" on synthetic data,
// computed on the CPU with OpenBLAS, trained through the ZeRO engine's hooks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zcoll/zero.hpp"

namespace zero_train {

struct MlpShape {
  int input = 256;
  int hidden = 1024;
  int output = 256;
  int layers = 4;    // Linear layers (>= 1)
  int batch = 32;    // micro-batch rows per rank
  uint64_t seed = 1; // initial weights and data
};

class Mlp {
 public:
  explicit Mlp(const MlpShape& shape);
  // Two groups per layer, in forward order: "layerK.weight" [out, in] and "layerK.bias" [out].
  std::vector<zcoll::zero::GroupSpec> groups() const;
  int64_t parameters() const;
  // Initial values of group g (the same on every rank).
  std::vector<float> initialValues(int g) const;
  // One micro-batch through the engine's hooks: forward, loss, backward (gradients added into the
  // engine's buffers, scaled by its loss scale). Returns the micro-batch's mean squared error, or
  // NaN with *error set when an engine call failed.
  double microBatch(zcoll::zero::Engine& engine, int64_t step, int micro, int rank, std::string* error);

 private:
  int in(int k) const { return k == 0 ? s_.input : s_.hidden; }
  int out(int k) const { return k == s_.layers - 1 ? s_.output : s_.hidden; }
  void makeData(int64_t step, int micro, int rank);
  // w as fp32 (from the engine's precision) into a scratch copy.
  const float* asFloat(zcoll::zero::DType type, const void* p, int64_t n, std::vector<float>& scratch) const;
  bool addGrad(zcoll::zero::Engine& engine, int g, const float* grad, int64_t n, std::string* error);

  MlpShape s_;
  std::vector<float> teacher_;              // [input, output]
  std::vector<std::vector<float>> acts_;    // acts_[k]: input of layer k (batch x in(k)); acts_[layers]: output
  std::vector<float> x_, target_, delta_, deltaPrev_, wScratch_, bScratch_, gradW_, gradB_, gScratch_;
};

}  // namespace zero_train

// loss_scaler.hpp - fp16 loss scaling as DeepSpeed's DynamicLossScaler (and its static form).
#pragma once

#include <cstdint>

#include "zcoll/zero.hpp"

namespace zcoll::zero {

class LossScaler {
 public:
  explicit LossScaler(const Fp16Config& config);
  double scale() const { return scale_; }
  // After each boundary: an overflowed step lowers the scale (after `hysteresis` overflows), a run
  // of loss_scale_window clean steps raises it.
  void update(bool overflow);

  // Checkpointed state.
  struct State {
    double scale;
    int hysteresis;
    int64_t iteration;
    int64_t lastOverflow;
  };
  State state() const { return {scale_, hysteresis_, iteration_, lastOverflow_}; }
  void restore(const State& s);

 private:
  bool dynamic_;
  double scale_;
  double minScale_;
  int64_t window_;
  int delayedShift_;
  bool consecutiveHysteresis_;
  int hysteresis_;
  int64_t iteration_ = 0;
  int64_t lastOverflow_ = -1;
};

}  // namespace zcoll::zero

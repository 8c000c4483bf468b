// loss_scaler.cpp - see loss_scaler.hpp. The rules are DeepSpeed's (runtime/fp16/loss_scaler.py).
#include "loss_scaler.hpp"

#include <algorithm>
#include <cmath>

namespace zcoll::zero {

LossScaler::LossScaler(const Fp16Config& c)
    : dynamic_(c.enabled && c.lossScale == 0),
      scale_(!c.enabled ? 1.0 : c.lossScale > 0 ? c.lossScale : std::ldexp(1.0, c.initialScalePower)),
      minScale_(c.minLossScale), window_(std::max<int64_t>(c.lossScaleWindow, 1)),
      delayedShift_(std::max(c.hysteresis, 1)), consecutiveHysteresis_(c.consecutiveHysteresis),
      hysteresis_(delayedShift_) {}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    if (delayedShift_ == 1 || hysteresis_ == 1) scale_ = std::max(scale_ / 2, minScale_);
    else --hysteresis_;
    lastOverflow_ = iteration_;
  } else {
    if (consecutiveHysteresis_) hysteresis_ = delayedShift_;
    if ((iteration_ - lastOverflow_) % window_ == 0) {
      if (!consecutiveHysteresis_) hysteresis_ = delayedShift_;
      scale_ *= 2;
    }
  }
  ++iteration_;
}

void LossScaler::restore(const State& s) {
  scale_ = s.scale;
  hysteresis_ = s.hysteresis;
  iteration_ = s.iteration;
  lastOverflow_ = s.lastOverflow;
}

}  // namespace zcoll::zero

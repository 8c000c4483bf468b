// cost_model.cpp - the measured curves' interpolation and the model's byte form (cost_model.hpp).
#include "algorithms/cost_model.hpp"

#include <cstring>

namespace zcoll {

double CostModel::measured(std::string_view algo, size_t bytes) const {
  const int n = std::clamp(points, 0, kCalibrationPoints);
  if (n == 0) return -1.0;
  for (const MeasuredCurve& c : allReduce) {
    if (algo != c.algo) continue;
    const double x = static_cast<double>(bytes);
    if (x <= kCalibrationBytes[0] || n == 1) return c.seconds[0];
    const double last = static_cast<double>(kCalibrationBytes[n - 1]);
    if (x > last) {  // bandwidth-bound: time grows linearly with the bytes
      const double prev = static_cast<double>(kCalibrationBytes[n - 2]);
      const double slope = std::max(0.0, static_cast<double>(c.seconds[n - 1] - c.seconds[n - 2]) / (last - prev));
      return c.seconds[n - 1] + slope * (x - last);
    }
    int k = 1;
    while (k < n - 1 && x > static_cast<double>(kCalibrationBytes[k])) ++k;
    const double x0 = std::log(static_cast<double>(kCalibrationBytes[k - 1]));
    const double x1 = std::log(static_cast<double>(kCalibrationBytes[k]));
    const double y0 = std::log(std::max(1e-9f, c.seconds[k - 1])), y1 = std::log(std::max(1e-9f, c.seconds[k]));
    return std::exp(y0 + (y1 - y0) * (std::log(x) - x0) / (x1 - x0));
  }
  return -1.0;
}

namespace {

// Layout: magic, alpha, beta, message, points, curves; per curve: name length, name, the seconds.
constexpr uint32_t kModelMagic = 0x324d437a;  // "zCM2"
constexpr uint32_t kMaxCurves = 4096;
constexpr uint32_t kMaxName = 256;

template <typename T>
void put(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
bool take(std::string_view* in, T* v) {
  if (in->size() < sizeof *v) return false;
  std::memcpy(v, in->data(), sizeof *v);
  in->remove_prefix(sizeof *v);
  return true;
}

}  // namespace

std::string CostModel::serialize() const {
  std::string out;
  put(&out, kModelMagic);
  put(&out, alpha);
  put(&out, beta);
  put(&out, message);
  put(&out, static_cast<int32_t>(points));
  put(&out, static_cast<uint32_t>(allReduce.size()));
  for (const MeasuredCurve& c : allReduce) {
    put(&out, static_cast<uint32_t>(c.algo.size()));
    out += c.algo;
    put(&out, c.seconds);
  }
  return out;
}

bool CostModel::parse(std::string_view in, CostModel* out) {
  CostModel m;
  uint32_t magic = 0, curves = 0;
  int32_t points = 0;
  if (!take(&in, &magic) || magic != kModelMagic || !take(&in, &m.alpha) || !take(&in, &m.beta) ||
      !take(&in, &m.message) || !take(&in, &points) || points < 0 || points > kCalibrationPoints ||
      !take(&in, &curves) || curves > kMaxCurves)
    return false;
  m.points = points;
  m.allReduce.resize(curves);
  for (MeasuredCurve& c : m.allReduce) {
    uint32_t len = 0;
    if (!take(&in, &len) || len == 0 || len > kMaxName || in.size() < len) return false;
    c.algo.assign(in.data(), len);
    in.remove_prefix(len);
    if (!take(&in, &c.seconds)) return false;
  }
  if (!in.empty()) return false;
  *out = std::move(m);
  return true;
}

}  // namespace zcoll

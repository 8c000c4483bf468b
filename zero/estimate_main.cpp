// zcoll-zero-estimate - per-rank model-state memory of a ZeRO job, by the ZeRO paper's formulas.
//   zcoll-zero-estimate --params P --ranks N --stage S [--offload-optimizer] [--offload-param]
// P accepts K/M/G/T suffixes (powers of 1000: 1.5B parameters = 1.5G).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "zcoll/zero.hpp"

namespace {

int usage(const char* why) {
  if (why) std::fprintf(stderr, "zcoll-zero-estimate: %s\n", why);
  std::fprintf(stderr,
               "usage: zcoll-zero-estimate --params P --ranks N --stage S [--offload-optimizer] [--offload-param]\n"
               "  P: parameter count (suffixes K, M, G, T = 1e3, 1e6, 1e9, 1e12); S: 0-3\n");
  return 2;
}

bool parseCount(const char* s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (end == s) return false;
  if (*end == 'K' || *end == 'k') v *= 1e3, ++end;
  else if (*end == 'M' || *end == 'm') v *= 1e6, ++end;
  else if (*end == 'G' || *end == 'g' || *end == 'B' || *end == 'b') v *= 1e9, ++end;
  else if (*end == 'T' || *end == 't') v *= 1e12, ++end;
  if (*end || !(v >= 1) || v > 9e15) return false;
  *out = v;
  return true;
}

std::string bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  double params = 0;
  long ranks = 0, stage = -1;
  bool offOpt = false, offParam = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "--params") {
      const char* v = value();
      if (!v || !parseCount(v, &params)) return usage("--params: expected a count such as 7G or 350M");
    } else if (a == "--ranks") {
      const char* v = value();
      char* end = nullptr;
      ranks = v ? std::strtol(v, &end, 10) : 0;
      if (!v || *end || ranks < 1 || ranks > 1000000) return usage("--ranks: expected 1 to 1000000");
    } else if (a == "--stage") {
      const char* v = value();
      char* end = nullptr;
      stage = v ? std::strtol(v, &end, 10) : -1;
      if (!v || *end || stage < 0 || stage > 3) return usage("--stage: expected 0, 1, 2 or 3");
    } else if (a == "--offload-optimizer") {
      offOpt = true;
    } else if (a == "--offload-param") {
      offParam = true;
    } else if (a == "-h" || a == "--help") {
      usage(nullptr);
      return 0;
    } else {
      return usage(("unknown argument " + a).c_str());
    }
  }
  if (params <= 0) return usage("--params is required");
  if (ranks <= 0) return usage("--ranks is required");
  if (stage < 0) return usage("--stage is required");
  if (offOpt && stage == 0) return usage("--offload-optimizer needs stage 1, 2 or 3");
  if (offParam && stage != 3) return usage("--offload-param needs stage 3");
  const auto p = static_cast<int64_t>(params);
  const zcoll::zero::MemoryEstimate m =
      zcoll::zero::estimateModelStates(p, static_cast<int>(ranks), static_cast<int>(stage), offOpt, offParam);
  static const char* formula[] = {"16P", "4P + 12P/N", "2P + 14P/N", "16P/N"};
  std::printf("# mixed-precision Adam: 2 B params + 2 B grads (16-bit) + 12 B fp32 master, momentum, variance per parameter\n");
  std::printf("params %lld, ranks %ld, stage %ld (%s)%s%s\n", static_cast<long long>(p), ranks, stage, formula[stage],
              offOpt ? ", optimizer offloaded" : "", offParam ? ", parameters offloaded" : "");
  std::printf("per rank: device %lld bytes (%s), host %lld bytes (%s)\n", static_cast<long long>(m.deviceBytes),
              bytes(static_cast<double>(m.deviceBytes)).c_str(), static_cast<long long>(m.hostBytes),
              bytes(static_cast<double>(m.hostBytes)).c_str());
  return 0;
}

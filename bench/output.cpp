// output.cpp - the table, CSV and JSON of zcoll-bench (see output.hpp).
#include "bench/output.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

namespace zcoll::bench {

void printHeader(FILE* out, const Args& a, int nranks, const std::string& algo) {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  const char* redop = traits(a.coll).reduces ? opName(a.redop) : "none";
  std::fprintf(out, "# zcoll-bench-format v1\n");
  std::fprintf(out, "# anchor: zcoll  coll: %s  algo: %s  nranks: %d  dtype: %s  redop: %s  inplace: %d\n",
               traits(a.coll).tableName.data(), algo.c_str(), nranks, typeName(a.dtype), redop,
               a.coll == Collective::Broadcast ? 1 : a.inplace);
  std::fprintf(out,
               "# sweep: -b %zu -e %zu -f %g -i %zu  warmup: %d  iters: %d  trials: %d  budget: %zu  miniters: %d  "
               "sec-per-size: %g  total-sec: %g  check: %d  root: %d\n",
               a.minBytes, a.maxBytes, a.stepFactor, a.stepBytes, a.warmup, a.iters, a.trials, a.budget, a.minIters,
               a.sizeSec, a.totalSec, a.check, a.root);
  std::fprintf(out, "# host: %s  ncpus: %ld\n", host, sysconf(_SC_NPROCESSORS_ONLN));
  int version = 0;
  zcollGetVersion(&version);
  std::fprintf(out, "# config: zcoll %d  buffers: %s%s\n", version,
               a.device ? "device" : a.memAlloc ? "zcollMemAlloc" : "aligned_alloc",
               a.fresh ? "  fresh: a store per input line before each op" : "");
  double la[3] = {0, 0, 0};
  if (getloadavg(la, 3) < 0) la[0] = -1;
  std::fprintf(out, "# loadavg at start: %.2f %.2f %.2f\n", la[0], la[1], la[2]);
  std::fprintf(out,
               "# time = median over %d trials of [mean over ranks of (per-rank wall time of a loop of iters ops) / "
               "iters]\n",
               a.trials);
  std::fprintf(out, "# min/max(us) = fastest/slowest trial; GB/s = 1e9 B/s\n#\n");
  std::fprintf(out, "# %10s %12s %6s %6s %12s %12s %12s %8s %6s %12s %12s  %s\n", "size(B)", "count", "type",
               "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "iters", "min(us)", "max(us)", "algo");
  std::fflush(out);
}

// The format-v1 table of one communicator's results.
void printTable(FILE* out, const Args& a, int nranks, const std::string& label, const std::vector<SizeResult>& rows) {
  printHeader(out, a, nranks, label);
  double busbwSum = 0;
  long long wrong = 0, faults = 0;
  for (const SizeResult& r : rows) {
    faults += r.faults;
    const double algbw = r.algbw(), busbw = algbw * busFactor(a.coll, nranks);
    std::fprintf(out, "  %10zu %12zu %6s %6s %12.2f %12.3f %12.3f %8lld %6d %12.2f %12.2f  %s\n", r.bytes, r.count,
                 typeName(a.dtype), traits(a.coll).reduces ? opName(a.redop) : "none", r.sec * 1e6, algbw, busbw, r.wrong, r.iters,
                 r.tmin * 1e6, r.tmax * 1e6, r.algo.c_str());
    busbwSum += busbw;
    wrong += std::max(0LL, r.wrong);
  }
  double la[3] = {0, 0, 0};
  if (getloadavg(la, 3) < 0) la[0] = -1;
  std::fprintf(out, "# loadavg at end: %.2f %.2f %.2f\n", la[0], la[1], la[2]);
  std::fprintf(out, "# Out of bounds values : %lld %s\n", a.check ? wrong : 0LL,
               !a.check ? "(not checked)" : (wrong ? "FAILED" : "OK"));
  std::fprintf(out, "# Avg bus bandwidth    : %.4f\n", rows.empty() ? 0.0 : busbwSum / static_cast<double>(rows.size()));
  std::fprintf(out, "# minor page faults in the timed loops: %lld (all ranks, all sizes)\n", faults);
  std::fprintf(out, "# wrong total: %lld\n", a.check ? wrong : -1LL);
  std::fflush(out);
}

void printCsv(FILE* out, const Args& a, int nranks, const std::vector<std::string>& labels,
              const std::vector<std::vector<SizeResult>>& results, bool header) {
  if (header)
    std::fprintf(out, "label,coll,nranks,size_bytes,count,type,redop,time_us,algbw_gbps,busbw_gbps,wrong,iters,min_us,"
                      "max_us,algo\n");
  for (size_t k = 0; k < labels.size() && k < results.size(); ++k)
    for (const SizeResult& r : results[k]) {
      const double algbw = r.algbw();
      std::fprintf(out, "%s,%s,%d,%zu,%zu,%s,%s,%.3f,%.4f,%.4f,%lld,%d,%.3f,%.3f,%s\n", labels[k].c_str(),
                   traits(a.coll).tableName.data(), nranks, r.bytes, r.count, typeName(a.dtype), traits(a.coll).reduces ? opName(a.redop) : "none",
                   r.sec * 1e6, algbw,
                   algbw * busFactor(a.coll, nranks), r.wrong, r.iters, r.tmin * 1e6, r.tmax * 1e6, r.algo.c_str());
    }
  std::fflush(out);
}

bool writeJson(const std::string& path, const Args& a, int nranks, const std::vector<std::string>& labels,
               const std::vector<std::vector<SizeResult>>& results) {
  using nlohmann::json;
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  int version = 0;
  zcollGetVersion(&version);
  json doc = {{"format", "zcoll-bench-json v1"},
              {"anchor", "zcoll"},
              {"version", version},
              {"host", host},
              {"coll", traits(a.coll).tableName.data()},
              {"nranks", nranks},
              {"dtype", typeName(a.dtype)},
              {"redop", traits(a.coll).reduces ? opName(a.redop) : "none"},
              {"inplace", a.inplace},
              {"trials", a.trials},
              {"results", json::object()}};
  for (size_t k = 0; k < labels.size() && k < results.size(); ++k) {
    json rows = json::array();
    for (const SizeResult& r : results[k]) {
      const double algbw = r.algbw();
      rows.push_back({{"size_bytes", r.bytes}, {"count", r.count}, {"time_us", r.sec * 1e6}, {"algbw_gbps", algbw},
                      {"busbw_gbps", algbw * busFactor(a.coll, nranks)}, {"wrong", r.wrong}, {"iters", r.iters}, {"page_faults", r.faults},
                      {"min_us", r.tmin * 1e6}, {"max_us", r.tmax * 1e6}, {"algo", r.algo}});
    }
    doc["results"][labels[k]] = std::move(rows);
  }
  std::ofstream f(path);
  f << doc.dump(2) << "\n";
  if (!f) {
    std::fprintf(stderr, "zcoll-bench: cannot write -J %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace zcoll::bench

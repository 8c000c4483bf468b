// output.hpp - what zcoll-bench prints: the format-v1 table of ../shared/anchors/README.md, CSV rows
// (--csv) and a JSON file (-J), from the same results.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "bench/engine.hpp"

namespace zcoll::bench {

// One size of a sweep, for one communicator.
struct SizeResult {
  size_t bytes = 0;
  size_t count = 0;
  double sec = 0, tmin = 0, tmax = 0;
  int iters = 0;
  long long wrong = -1;
  long long faults = 0;  // minor page faults in the timed loops, all ranks (the steady state: 0)
  std::string algo;

  double algbw() const { return static_cast<double>(bytes) / 1e9 / sec; }  // GB/s
};

// The table's header (the anchors' "# ..." lines) and one communicator's table under it.
void printHeader(FILE* out, const Args& a, int nranks, const std::string& algo);
void printTable(FILE* out, const Args& a, int nranks, const std::string& label, const std::vector<SizeResult>& rows);

// Every row of every labelled result set (labels[k] names results[k]: an algorithm or "auto").
// header: the column line first (once per output when several type x op tables follow).
void printCsv(FILE* out, const Args& a, int nranks, const std::vector<std::string>& labels,
              const std::vector<std::vector<SizeResult>>& results, bool header = true);
// Returns false (message on stderr) if the file cannot be written.
bool writeJson(const std::string& path, const Args& a, int nranks, const std::vector<std::string>& labels,
               const std::vector<std::vector<SizeResult>>& results);

}  // namespace zcoll::bench

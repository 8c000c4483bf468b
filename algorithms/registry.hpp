// registry.hpp - every algorithm zcoll has, and the choice of one for a call (step 1 of
// Communicator::plan, comm/communicator.hpp, which decides the rest of how an op runs).
//
// Selection, per call: a host op up to ZCOLL_EAGER_BYTES / (N-1), below the lower bound of every
// ZCOLL_ALGO rule for its collective, goes to the collective's eager algorithm (algorithms/eager.cpp);
// otherwise the first ZCOLL_ALGO rule that matches the collective and size and names an algorithm
// that supports the call; otherwise the supported algorithm with the lowest cost under the
// communicator's measured CostModel. An algorithm that cannot serve a call says NotSupported and
// selection falls through; if none can, the call fails with every reason.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "algorithms/algorithm.hpp"

namespace zcoll {

const std::vector<const Algorithm*>& allAlgorithms();

// ZCOLL_ALGO, parsed once: comma-separated rules, each "NAME" (every collective and size),
// "COLL:NAME", or "COLL:LO-HI:NAME" with byte sizes (K/M/G suffixes, HI may be empty = no limit;
// LO inclusive, HI exclusive, sizes in opBytes' convention), e.g. "allreduce:0-64K:direct,64K-:ring".
struct AlgoRule {
  bool anyCollective = true;
  Collective coll = Collective::AllReduce;
  size_t lo = 0;
  size_t hi = std::numeric_limits<size_t>::max();
  std::string name;
};
Status parseAlgoOverride(const std::string& text, std::vector<AlgoRule>* rules);

// The choice for one communicator (fixed rank count). Rule names are resolved and the cheapest
// algorithm per collective and power-of-two size class is tabulated when the model is set, so a call
// costs a table lookup (support depends on the communicator only, so the table holds supported
// algorithms): no virtual call, no string work, no cost evaluation, no allocation.
class AlgorithmSelector {
 public:
  AlgorithmSelector() { prepare(); }
  // eagerBytes: host ops up to eagerBytes / (nranks - 1) (opBytes' convention) go to the
  // collective's eager algorithm, below the lower bound of every ZCOLL_ALGO rule for the collective
  // (0: never), on communicators of up to kEagerMaxRanks ranks.
  // Beyond, a rank's N-1 eager messages cost more than rd's log2 N steps save in call path (zcoll-sim).
  static constexpr int kEagerMaxRanks = 16;
  // The eager rule reaches past eagerBytes / (N-1) where the cost model prices eager cheapest, up to here.
  static constexpr double kEagerModelBytes = 16 * 1024;
  AlgorithmSelector(std::vector<AlgoRule> rules, CostModel model, int nranks, size_t eagerBytes = 0);
  const CostModel& model() const { return model_; }
  // Which ranks share a host (default: one host); hierarchical algorithms are chosen by it.
  void setHosts(patterns::HostLayout hosts) {
    hosts_ = std::move(hosts);
    prepare();
  }
  const patterns::HostLayout& hosts() const { return hosts_; }
  void setModel(const CostModel& m) {
    model_ = m;
    prepare();
  }
  // *forced (when given): whether a ZCOLL_ALGO rule made the choice.
  Status select(const OpArgs& op, int nranks, const Algorithm** out, bool* forced = nullptr) const;
  // The automatic choice for `coll` by size, for logs: "ps below 32K, direct below 128K, ring above"
  // (sizes in the benchmark's convention; ZCOLL_ALGO rules are not included).
  std::string describe(Collective coll) const;

 private:
  // Size classes: 8 per power of two (a class spans 9-12 % in size, so a crossover between two
  // algorithms is placed within that); class 0 is 0 bytes. See sizeClass() in registry.cpp.
  static constexpr int kClassesPerOctave = 8;
  static constexpr int kSizeClasses = 65 * kClassesPerOctave;
  struct ResolvedRule {
    AlgoRule rule;
    const Algorithm* byCollective[kNumCollectives] = {};
  };
  void prepare();
  // The least-cost supported algorithm (nullptr and the reasons if none).
  const Algorithm* cheapest(const OpArgs& op, std::string* reasons) const;
  // Predicted seconds of op by a (cheapest() compares these).
  double price(const Algorithm& a, const OpArgs& op) const;

  std::vector<ResolvedRule> rules_;
  CostModel model_;
  int nranks_ = 1;
  patterns::HostLayout hosts_ = patterns::HostLayout::fromHostIds({0});
  const Algorithm* table_[kNumCollectives][kSizeClasses] = {};
  size_t eagerBytes_ = 0;
  const Algorithm* eager_[kNumCollectives] = {};
  size_t eagerEnd_[kNumCollectives] = {};  // host ops of fewer bytes go to eager_ (0: none)
};

}  // namespace zcoll

// registry.hpp - every algorithm zcoll has, and the choice of one for a call.
//
// Selection, per call: the first ZCOLL_ALGO rule that matches the collective and size and names an
// algorithm that supports the call; otherwise the supported algorithm with the lowest cost under the
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

class AlgorithmSelector {
 public:
  AlgorithmSelector() = default;
  AlgorithmSelector(std::vector<AlgoRule> rules, CostModel model) : rules_(std::move(rules)), model_(model) {}
  const CostModel& model() const { return model_; }
  void setModel(const CostModel& m) { model_ = m; }
  Status select(const OpArgs& op, int nranks, const Algorithm** out) const;

 private:
  std::vector<AlgoRule> rules_;
  CostModel model_;
};

}  // namespace zcoll

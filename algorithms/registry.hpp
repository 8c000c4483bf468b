// registry.hpp - every algorithm zcoll has, and the choice of one for a call.
//
// Selection: the ZCOLL_ALGO override if it names an algorithm of this collective that supports
// the call; otherwise the first registered algorithm that supports it (the cost model arrives with
// the algorithms issue). An algorithm that cannot serve a call says NotSupported and the next one
// is tried; if none can, the call fails with the reasons.
#pragma once

#include <string>
#include <vector>

#include "algorithms/algorithm.hpp"

namespace zcoll {

const std::vector<const Algorithm*>& allAlgorithms();

// `forced` has ZCOLL_ALGO's syntax: "NAME" for every collective, or "COLL:NAME[,COLL:NAME...]".
Status validateAlgoOverride(const std::string& forced);
Status selectAlgorithm(const OpArgs& op, int nranks, const std::string& forced, const Algorithm** out);

}  // namespace zcoll

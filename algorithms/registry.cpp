// registry.cpp - the list of algorithms (one line each) and selection (see registry.hpp).
#include "algorithms/registry.hpp"

#include <string_view>

namespace zcoll {

// One line per algorithm: its factory, defined in the algorithm's own file.
#define ZCOLL_ALGORITHMS(X) \
  X(ringAllReduce)          \
  X(ringAllGather)          \
  X(ringReduceScatter)      \
  X(ringBroadcast)          \
  X(ringReduce)             \
  X(rhdAllReduce)           \
  X(rhdReduceScatter)       \
  X(rhdAllGather)           \
  X(directAllReduce)        \
  X(directReduceScatter)    \
  X(directAllGather)        \
  X(psAllReduce)            \
  X(treeAllReduce)          \
  X(treeBroadcast)          \
  X(treeReduce)             \
  X(directGather)           \
  X(directScatter)          \
  X(directAllToAll)         \
  X(disseminationBarrier)   \
  X(p2pBatch)

#define ZCOLL_DECLARE(f) const Algorithm& f();
ZCOLL_ALGORITHMS(ZCOLL_DECLARE)
#undef ZCOLL_DECLARE

const std::vector<const Algorithm*>& allAlgorithms() {
#define ZCOLL_ENTRY(f) &f(),
  static const std::vector<const Algorithm*> list = {ZCOLL_ALGORITHMS(ZCOLL_ENTRY)};
#undef ZCOLL_ENTRY
  return list;
}

namespace {

// The name ZCOLL_ALGO asks for this collective ("" = none).
std::string_view forcedName(std::string_view forced, Collective coll) {
  if (forced.find(':') == std::string_view::npos) return forced;
  while (!forced.empty()) {
    size_t comma = forced.find(',');
    std::string_view item = forced.substr(0, comma);
    size_t colon = item.find(':');
    Collective c;
    if (colon != std::string_view::npos && parseCollective(item.substr(0, colon), &c) && c == coll)
      return item.substr(colon + 1);
    forced = comma == std::string_view::npos ? std::string_view() : forced.substr(comma + 1);
  }
  return {};
}

bool known(std::string_view name) {
  for (const Algorithm* a : allAlgorithms())
    if (a->name() == name) return true;
  return false;
}

}  // namespace

Status validateAlgoOverride(const std::string& forced) {
  if (forced.empty()) return Status::ok();
  std::string_view rest(forced);
  if (rest.find(':') == std::string_view::npos) {
    if (!known(rest)) return invalidArgument("ZCOLL_ALGO='{}': no algorithm of that name", forced);
    return Status::ok();
  }
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    size_t colon = item.find(':');
    Collective c;
    if (colon == std::string_view::npos || !parseCollective(item.substr(0, colon), &c) ||
        !known(item.substr(colon + 1)))
      return invalidArgument("ZCOLL_ALGO='{}': '{}' is not COLLECTIVE:ALGORITHM with known names", forced, item);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return Status::ok();
}

Status selectAlgorithm(const OpArgs& op, int nranks, const std::string& forced, const Algorithm** out) {
  std::string_view want = forcedName(forced, op.coll);
  std::string reasons;
  for (int pass = want.empty() ? 1 : 0; pass < 2; ++pass) {
    for (const Algorithm* a : allAlgorithms()) {
      if (a->collective() != op.coll || (pass == 0 && a->name() != want)) continue;
      Status s = a->supports(op, nranks);
      if (s) {
        *out = a;
        return Status::ok();
      }
      reasons += fmt::format(" {}: {};", a->name(), s.message());
    }
  }
  return notSupported("no algorithm can run {} on {} ranks:{}", collectiveName(op.coll), nranks,
                      reasons.empty() ? " none registered" : reasons);
}

}  // namespace zcoll

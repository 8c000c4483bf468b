// registry.cpp - the list of algorithms (one line each) and selection (see registry.hpp).
#include "algorithms/registry.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

#include "core/config.hpp"

namespace zcoll {

// One line per algorithm: its factory, defined in the algorithm's own file.
#define ZCOLL_ALGORITHMS(X) \
  X(ringAllReduce)          \
  X(ringAllGather)          \
  X(ringReduceScatter)      \
  X(ringBroadcast)          \
  X(ringReduce)             \
  X(rhdAllReduce)           \
  X(rdAllReduce)            \
  X(rhdReduceScatter)       \
  X(rhdAllGather)           \
  X(directAllReduce)        \
  X(directReduceScatter)    \
  X(directAllGather)        \
  X(eagerAllReduce)         \
  X(eagerReduceScatter)     \
  X(eagerReduce)            \
  X(eagerAllGather)         \
  X(eagerBroadcast)         \
  X(psAllReduce)            \
  X(treeAllReduce)          \
  X(treeBroadcast)          \
  X(treeReduce)             \
  X(hierAllReduce)          \
  X(hierAllGather)          \
  X(hierReduceScatter)      \
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

bool known(std::string_view name) {
  for (const Algorithm* a : allAlgorithms())
    if (a->name() == name) return true;
  return false;
}

bool parseSize(std::string_view s, size_t* out) {
  int64_t v = 0;
  if (!parseByteSize(s, &v)) return false;
  *out = static_cast<size_t>(v);
  return true;
}

std::string knownNames() {
  std::string names;
  for (const Algorithm* a : allAlgorithms()) {
    if (names.find(a->name()) != std::string::npos) continue;
    if (!names.empty()) names += ", ";
    names += a->name();
  }
  return names;
}

}  // namespace

Status parseAlgoOverride(const std::string& text, std::vector<AlgoRule>* rules) {
  rules->clear();
  std::string_view rest(text);
  while (!rest.empty()) {
    const std::string_view item = nextListItem(&rest);
    AlgoRule rule;
    std::string_view name = item;
    const size_t first = item.find(':');
    if (first != std::string_view::npos) {
      rule.anyCollective = false;
      if (!parseCollective(item.substr(0, first), &rule.coll))
        return invalidArgument("ZCOLL_ALGO='{}': '{}' is not a collective", text, item.substr(0, first));
      name = item.substr(first + 1);
      const size_t second = name.find(':');
      if (second != std::string_view::npos) {
        const std::string_view range = name.substr(0, second);
        name = name.substr(second + 1);
        const size_t dash = range.find('-');
        if (dash == std::string_view::npos || !parseSize(range.substr(0, dash), &rule.lo) ||
            (dash + 1 < range.size() && !parseSize(range.substr(dash + 1), &rule.hi)) || rule.hi <= rule.lo)
          return invalidArgument("ZCOLL_ALGO='{}': '{}' is not a size range LO-HI (e.g. 0-64K or 64K-)", text, range);
      }
    }
    if (!known(name))
      return invalidArgument("ZCOLL_ALGO='{}': no algorithm named '{}' (known: {})", text, name, knownNames());
    rule.name = std::string(name);
    rules->push_back(std::move(rule));
  }
  return Status::ok();
}

namespace {

// Octave k (1..64: bytes in [2^(k-1), 2^k)) times 8, plus the three bits after the leading one.
constexpr int kPerOctave = 8;
int sizeClass(size_t bytes) {
  if (bytes == 0) return 0;
  const int k = 64 - __builtin_clzll(bytes);
  const int sub = k >= 4 ? static_cast<int>((bytes >> (k - 4)) & 7) : static_cast<int>((bytes << (4 - k)) & 7);
  return k * kPerOctave + sub;
}

// Where class cls (>= kPerOctave) starts: 2^(k-1) * (1 + sub/8) bytes; cls + 1 is where it ends.
double classStart(int cls) {
  return std::ldexp(1.0 + (cls % kPerOctave) / 8.0, cls / kPerOctave - 1);
}

// The size a class is priced at: the geometric middle of its range.
size_t classBytes(int cls) {
  if (cls < kPerOctave) return 0;
  return std::max<size_t>(1, static_cast<size_t>(std::sqrt(classStart(cls) * classStart(cls + 1))));
}

// "576K", "1M", "1536", in the largest unit that divides exactly.
std::string sizeText(int64_t v) {
  for (auto [shift, unit] : {std::pair{30, "G"}, std::pair{20, "M"}, std::pair{10, "K"}})
    if (v >= (int64_t{1} << shift) && v % (int64_t{1} << shift) == 0) return fmt::format("{}{}", v >> shift, unit);
  return std::to_string(v);
}

// An op of `bytes` in opBytes' convention, for pricing (uint8 elements).
OpArgs opOfBytes(Collective coll, size_t bytes, int nranks) {
  const size_t perRank = opBytes(coll, 1, DataType::Uint8, nranks);  // 1 or nranks
  return OpArgs{coll, nullptr, nullptr, bytes / perRank, DataType::Uint8};
}

}  // namespace

AlgorithmSelector::AlgorithmSelector(std::vector<AlgoRule> rules, CostModel model, int nranks, size_t eagerBytes)
    : model_(model),
      nranks_(nranks),
      hosts_(patterns::HostLayout::fromHostIds(std::vector<uint64_t>(static_cast<size_t>(nranks), 0))),
      eagerBytes_(eagerBytes) {
  for (AlgoRule& r : rules) {
    ResolvedRule rr;
    for (const Algorithm* a : allAlgorithms())
      if (a->name() == r.name) rr.byCollective[static_cast<int>(a->collective())] = a;
    rr.rule = std::move(r);
    rules_.push_back(std::move(rr));
  }
  prepare();
}

void AlgorithmSelector::prepare() {
  static_assert(kClassesPerOctave == kPerOctave, "sizeClass() splits an octave in 8");
  for (int c = 0; c < kNumCollectives; ++c) {
    for (int k = 0; k < kSizeClasses; ++k) {
      if (k > 0 && k < kClassesPerOctave) continue;  // no such class
      std::string unused;
      table_[c][k] = cheapest(opOfBytes(static_cast<Collective>(c), classBytes(k), nranks_), &unused);
    }
    // The eager rule: host ops up to eagerBytes_ / (N-1) (all-reduce, broadcast: what a rank sends
    // to each of N-1 peers), below the lower bound of every ZCOLL_ALGO rule for the collective.
    eager_[c] = nullptr;
    eagerEnd_[c] = 0;
    for (const Algorithm* a : allAlgorithms())
      if (static_cast<int>(a->collective()) == c && a->eager() && a->supportsOn(hosts_).isOk()) eager_[c] = a;
    if (!eager_[c] || eagerBytes_ == 0 || nranks_ > kEagerMaxRanks) continue;
    // On one host, always up to there (the crossover measured on shm); across hosts the network's
    // fan-out decides from the smallest size (2 hosts of 8 at 8 B: eager 1.12x of rd).
    const bool oneHost = hosts_.hosts <= 1;
    if (oneHost) eagerEnd_[c] = eagerBytes_ / static_cast<size_t>(std::max(1, nranks_ - 1)) + 1;
    // Beyond, up to kEagerModelBytes, while the model prices eager below the table's choice (a fast
    // network's fan-out, which this host's shm measured crossover does not describe).
    for (int k = oneHost ? sizeClass(eagerEnd_[c]) : kClassesPerOctave;
         k < kSizeClasses && classStart(k) < kEagerModelBytes; ++k) {
      const OpArgs op = opOfBytes(static_cast<Collective>(c), classBytes(k), nranks_);
      if (!table_[c][k] || price(*eager_[c], op) >= price(*table_[c][k], op)) break;
      eagerEnd_[c] = std::max(eagerEnd_[c], static_cast<size_t>(classStart(k + 1)));
    }
    for (const ResolvedRule& r : rules_)
      if ((r.rule.anyCollective || static_cast<int>(r.rule.coll) == c) && r.byCollective[c] &&
          r.byCollective[c]->supportsOn(hosts_).isOk())
        eagerEnd_[c] = std::min(eagerEnd_[c], r.rule.lo);
  }
}

double AlgorithmSelector::price(const Algorithm& a, const OpArgs& op) const {
  // All-reduce by its measured curve where the calibration timed the algorithm.
  const double m = op.coll == Collective::AllReduce
                       ? model_.measured(a.name(), opBytes(op.coll, op.count, op.dtype, nranks_))
                       : -1.0;
  return m >= 0 ? m : a.costOn(op, hosts_, model_);
}

const Algorithm* AlgorithmSelector::cheapest(const OpArgs& op, std::string* reasons) const {
  const Algorithm* best = nullptr;
  double bestCost = 0;
  for (const Algorithm* a : allAlgorithms()) {
    if (a->collective() != op.coll || a->eager()) continue;
    Status s = a->supportsOn(hosts_);
    if (!s) {
      *reasons += fmt::format(" {}: {};", a->name(), s.message());
      continue;
    }
    const double c = price(*a, op);
    if (!best || c < bestCost) {
      best = a;
      bestCost = c;
    }
  }
  return best;
}

Status AlgorithmSelector::select(const OpArgs& op, int nranks, const Algorithm** out, bool* forced) const {
  const int coll = static_cast<int>(op.coll);
  if (forced) *forced = false;
  if (nranks != nranks_) return internalError("selector for {} ranks asked about {}", nranks_, nranks);
  const size_t bytes = opBytes(op.coll, op.count, op.dtype, nranks);
  if (bytes < eagerEnd_[coll] && !op.device) {
    *out = eager_[coll];
    return Status::ok();
  }
  for (const ResolvedRule& r : rules_) {
    if ((!r.rule.anyCollective && r.rule.coll != op.coll) || bytes < r.rule.lo || bytes >= r.rule.hi) continue;
    const Algorithm* a = r.byCollective[coll];
    if (a && a->supportsOn(hosts_).isOk() && (!op.device || a->servesDevice())) {
      *out = a;
      if (forced) *forced = true;
      return Status::ok();
    }
  }
  // The table holds supported algorithms only (cheapest() checked them for this communicator).
  const Algorithm* a = table_[coll][sizeClass(bytes)];
  if (a) {
    *out = a;
    return Status::ok();
  }
  std::string reasons;
  a = cheapest(op, &reasons);
  if (!a)
    return notSupported("no algorithm can run {} on {} ranks:{}", collectiveName(op.coll), nranks,
                        reasons.empty() ? " none registered" : reasons);
  *out = a;
  return Status::ok();
}

std::string AlgorithmSelector::describe(Collective coll) const {
  const int c = static_cast<int>(coll);
  std::string out;
  const Algorithm* current = nullptr;
  for (int k = kClassesPerOctave; k < kSizeClasses; ++k) {
    const Algorithm* a = table_[c][k];
    if (a == current) continue;
    if (current) out += fmt::format("{} below {}, ", current->name(), sizeText(static_cast<int64_t>(classStart(k))));
    current = a;
  }
  out += current ? fmt::format("{} above", current->name()) : std::string("none");
  return out;
}

}  // namespace zcoll

// unique_id_fuzz.cpp - libFuzzer target: decodeUniqueId on arbitrary bytes. It must never crash or
// read out of bounds; whatever it accepts must encode back to the same 128 bytes. A second pass
// fixes the checksum first, so the fuzzer also reaches the field checks behind it.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "bootstrap/unique_id.hpp"

namespace {

void roundTrip(const char* id) {
  zcoll::UniqueIdFields f;
  if (!zcoll::decodeUniqueId(id, &f).isOk()) return;
  char again[zcoll::kUniqueIdBytes];
  zcoll::encodeUniqueId(f, again);
  if (std::memcmp(id, again, sizeof again) != 0) std::abort();  // accepted but not canonical
  (void)f.root.toString();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  char id[zcoll::kUniqueIdBytes] = {};
  std::memcpy(id, data, size < sizeof id ? size : sizeof id);
  roundTrip(id);
  // The same bytes with magic, version and checksum made valid.
  std::memcpy(id, "ZCID\x01\x00", 6);
  const uint32_t sum = static_cast<uint32_t>(zcoll::fnv1a(id, 42));
  std::memcpy(id + 42, &sum, 4);
  roundTrip(id);
  return 0;
}

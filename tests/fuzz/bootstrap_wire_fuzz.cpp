// bootstrap_wire_fuzz.cpp - libFuzzer target: the bootstrap's message checks on arbitrary bytes
// (what a hostile or broken peer can send to the rendezvous root, to a rank, or on the tree). They
// must never crash; a message they accept must satisfy every invariant the callers rely on.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "bootstrap/bootstrap_wire.hpp"

namespace {

template <typename T>
T from(const uint8_t* data, size_t size) {
  T v{};
  std::memcpy(static_cast<void*>(&v), data, size < sizeof v ? size : sizeof v);
  return v;
}

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zcoll;
  // The first 16 bytes double as "the secret", so the fuzzer can get past the secret check.
  Secret secret{};
  std::memcpy(secret.data(), data, size < secret.size() ? size : secret.size());
  const uint8_t* body = size > 16 ? data + 16 : data;
  const size_t bodySize = size > 16 ? size - 16 : 0;

  auto hello = from<wire::Hello>(body, bodySize);
  if (wire::checkHello(hello, secret).isOk()) {
    require(hello.rank >= 0 && hello.rank < hello.nranks && hello.nranks <= wire::kMaxRanks);
    require(std::memchr(hello.info.hostname, 0, sizeof hello.info.hostname) != nullptr);
    (void)hello.info.listen.toString();
  }
  auto reply = from<wire::Reply>(body, bodySize);
  StatusCode code = StatusCode::Ok;
  if (wire::checkReply(&reply, &code).isOk()) {
    require(std::strlen(reply.message) < sizeof reply.message);
    require(!statusCodeName(code).empty());
  }
  auto info = from<PeerInfo>(body, bodySize);
  if (wire::checkPeerInfo(info, info.rank).isOk()) (void)info.listen.toString();
  auto tree = from<wire::TreeHello>(body, bodySize);
  if (wire::checkTreeHello(tree, secret, tree.nonce, {3, 5}).isOk()) require(tree.rank == 3 || tree.rank == 5);
  if (wire::checkListenAddress(reply.parent, "the parent's").isOk()) (void)reply.parent.toString();
  return 0;
}
